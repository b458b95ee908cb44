package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// ProbeTimeout bounds Probe.
const ProbeTimeout = 3 * time.Second

var (
	// ErrTLSRequired: the native API speaks TLS (with client certificates)
	// and the caller is not configured for it.
	ErrTLSRequired = errors.New("TLS required: the native API there speaks TLS and requires a client certificate (--tls-cert-file, --tls-key-file and --tls-ca-file)")
	// ErrNotTLS: the caller speaks TLS and the native API there does not.
	ErrNotTLS = errors.New("the native API there does not speak TLS (leave out the --tls flags, or turn TLS on for the node's native API)")
)

// Probe checks, before any native API call, that addr is reachable and
// speaks TLS exactly when the caller does (cfg, nil for plaintext): a call
// that does not match would otherwise wait for its whole timeout and then
// blame the address. It opens one TCP connection and completes a TLS
// handshake with cfg (its certificate too, so the node has nothing to
// refuse), or with a plaintext caller only starts one to see whether the
// node answers in TLS; then it closes the connection. Nothing reaches the
// node's actors.
func Probe(ctx context.Context, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("native API %s: %w", addr, err)
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	useTLS := cfg != nil
	if cfg == nil {
		// Only whether the node answers in TLS matters here.
		cfg = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // nothing is sent over it
	} else if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(nc, cfg)
	err = tc.HandshakeContext(ctx)
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	speaksTLS := err == nil || errors.As(err, &alert) || errors.As(err, &verify)
	switch {
	case speaksTLS && !useTLS:
		return fmt.Errorf("native API %s: %w", addr, ErrTLSRequired)
	case !speaksTLS && useTLS:
		return fmt.Errorf("native API %s: %w", addr, ErrNotTLS)
	case err != nil && useTLS:
		return fmt.Errorf("native API %s: TLS handshake: %w", addr, err)
	}
	return nil
}
