package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cohort-coord/cohort/tlsconfig"
)

func TestTLSFlags(t *testing.T) {
	files := []string{"--tls-cert-file", "n.crt", "--tls-key-file", "n.key", "--tls-ca-file", "ca.crt"}
	cases := []struct {
		args                []string
		env                 map[string]string
		kafka, native, raft bool
		auth                tlsconfig.ClientAuth
	}{
		{nil, nil, false, false, false, tlsconfig.ClientAuthNone},
		{files, nil, true, true, true, tlsconfig.ClientAuthNone},
		{append(files, "--tls-links", "kafka"), nil, true, false, false, tlsconfig.ClientAuthNone},
		{append(files, "--tls-links", "raft,native", "--tls-client-auth", "require"), nil, false, true, true, tlsconfig.ClientAuthRequire},
		{nil, map[string]string{"COHORT_TLS_CERT_FILE": "n.crt", "COHORT_TLS_KEY_FILE": "n.key", "COHORT_TLS_CA_FILE": "ca.crt", "COHORT_TLS_LINKS": "kafka, raft", "COHORT_TLS_CLIENT_AUTH": "requested"}, true, false, true, tlsconfig.ClientAuthRequest},
	}
	for _, c := range cases {
		cfg, _, err := parseConfig(c.args, env(c.env), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
		tc := cfg.TLS
		if tc.Kafka != c.kafka || tc.Native != c.native || tc.Raft != c.raft || tc.KafkaClientAuth != c.auth {
			t.Errorf("%v %v: kafka %v native %v raft %v auth %v", c.args, c.env, tc.Kafka, tc.Native, tc.Raft, tc.KafkaClientAuth)
		}
		if c.kafka && (tc.CertFile != "n.crt" || tc.KeyFile != "n.key" || tc.CAFile != "ca.crt") {
			t.Errorf("%v %v: files %+v", c.args, c.env, tc.Files)
		}
	}
}

func TestInvalidTLSFlagsExitWith2(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", "n.crt"}, "certificate and key file go together"},
		{[]string{"--tls-ca-file", "ca.crt"}, "a CA file needs a certificate and key file"},
		{[]string{"--tls-cert-file", "n.crt", "--tls-key-file", "n.key"}, "need a CA file"},
		{[]string{"--tls-cert-file", "n.crt", "--tls-key-file", "n.key", "--tls-links", "kafka,http"}, `unknown link "http"`},
		{[]string{"--tls-cert-file", "n.crt", "--tls-key-file", "n.key", "--tls-links", ","}, "names no link"},
		{[]string{"--tls-client-auth", "sometimes"}, "want none, request or require"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if code := run(c.args, env(nil), &out); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d, output %q; want 2 and %q", c.args, code, out.String(), c.want)
		}
	}
}
