package main

import (
	"flag"
	"fmt"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/admin"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// tlsOptions are the global TLS flags: --tls (verify the server with the
// system roots or --tls-ca-file), --tls-cert-file and --tls-key-file (a
// client certificate; the native API needs one), each also from its
// COHORT_TLS_* variable.
type tlsOptions struct {
	on    bool
	files tlsconfig.Files
}

func addTLSFlags(fs *flag.FlagSet, getenv func(string) string) *tlsOptions {
	o := &tlsOptions{on: getenv("COHORT_TLS") == "true"}
	o.files = tlsconfig.Files{CertFile: getenv("COHORT_TLS_CERT_FILE"), KeyFile: getenv("COHORT_TLS_KEY_FILE"), CAFile: getenv("COHORT_TLS_CA_FILE")}
	fs.BoolVar(&o.on, "tls", o.on, "speak TLS (implied by the other --tls flags; env COHORT_TLS)")
	fs.StringVar(&o.files.CertFile, "tls-cert-file", o.files.CertFile, "client certificate (env COHORT_TLS_CERT_FILE)")
	fs.StringVar(&o.files.KeyFile, "tls-key-file", o.files.KeyFile, "its private key (env COHORT_TLS_KEY_FILE)")
	fs.StringVar(&o.files.CAFile, "tls-ca-file", o.files.CAFile, "CA certificates that sign the servers' certificates (env COHORT_TLS_CA_FILE; default the system roots)")
	return o
}

func (o *tlsOptions) enabled() bool { return o.on || o.files.Enabled() || o.files.CAFile != "" }

// kafka returns the franz-go options of the Kafka connection.
func (o *tlsOptions) kafka() ([]kgo.Opt, error) {
	if !o.enabled() {
		return nil, nil
	}
	cfg, err := tlsconfig.ClientConfig(o.files)
	if err != nil {
		return nil, err
	}
	return []kgo.Opt{kgo.DialTLSConfig(cfg)}, nil
}

// remote returns the protoactor remote options of the native API endpoint
// (cohortctl cluster): TLS both ways, with the client certificate.
func (o *tlsOptions) remote() ([]remote.ConfigOption, error) {
	if !o.enabled() {
		return nil, nil
	}
	if !o.files.Enabled() || o.files.CAFile == "" {
		return nil, fmt.Errorf("the native API over TLS needs --tls-cert-file, --tls-key-file and --tls-ca-file")
	}
	src, err := tlsconfig.Load(o.files, nil)
	if err != nil {
		return nil, err
	}
	return admin.RemoteTLS(src), nil
}
