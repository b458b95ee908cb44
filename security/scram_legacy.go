package security

import (
	"crypto/hmac"
	"encoding/base64"
	"strings"
)

// legacyFinal accepts the client-final message of librdkafka before 2.6.1,
// which puts its own nonce in front of the server's full nonce (client
// nonce + client nonce + server nonce) and signs the message as it sent
// it. Apache Kafka 3.8.1 and 3.9 accept that form too (the client's nonce
// must end with the server's; librdkafka#4895); the server's fresh nonce
// must still be there, so a replayed exchange fails. Only that exact form,
// without channel binding or authorization id, is accepted: every other
// message was refused by the SCRAM library already. The proof is checked
// with RFC 5802's formulas on the stored keys, compared in constant time.
func (s *Session) legacyFinal(final string) (string, error) {
	m, _ := ScramMechanism(s.mech)
	cfirst, ok := strings.CutPrefix(s.clientFirst, "n,,")
	if !ok {
		return "", ErrAuthenticationFailed
	}
	user, cnonce, ok := scramFirst(cfirst)
	if !ok || user != s.user {
		return "", ErrAuthenticationFailed
	}
	snonce, ok := attr(s.serverFirst, "r")
	if !ok || !strings.HasPrefix(snonce, cnonce) {
		return "", ErrAuthenticationFailed
	}
	withoutProof, proofB64, ok := strings.Cut(final, ",p=")
	if !ok || withoutProof != "c=biws,r="+cnonce+snonce {
		return "", ErrAuthenticationFailed
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	c, found := s.creds.Credential(user, m)
	if err != nil || !found {
		return "", ErrAuthenticationFailed
	}
	h := hashOf(m)
	mac := func(key []byte, msg string) []byte {
		w := hmac.New(h, key)
		w.Write([]byte(msg))
		return w.Sum(nil)
	}
	authMsg := cfirst + "," + s.serverFirst + "," + withoutProof
	sig := mac(c.GetStoredKey(), authMsg)
	if len(proof) != len(sig) {
		return "", ErrAuthenticationFailed
	}
	key := make([]byte, len(sig))
	for i := range sig {
		key[i] = proof[i] ^ sig[i]
	}
	d := h()
	d.Write(key)
	if !hmac.Equal(d.Sum(nil), c.GetStoredKey()) {
		return "", ErrAuthenticationFailed
	}
	return "v=" + base64.StdEncoding.EncodeToString(mac(c.GetServerKey(), authMsg)), nil
}

// scramFirst reads user and nonce of a client-first-message-bare
// ("n=user,r=nonce"); names with escapes are not taken.
func scramFirst(bare string) (user, nonce string, ok bool) {
	parts := strings.Split(bare, ",")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "n=") || !strings.HasPrefix(parts[1], "r=") || strings.Contains(parts[0], "=2") || strings.Contains(parts[0], "=3") {
		return "", "", false
	}
	return parts[0][2:], parts[1][2:], len(parts[1]) > 2
}

// attr is the value of key in a SCRAM message.
func attr(msg, key string) (string, bool) {
	for _, f := range strings.Split(msg, ",") {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}
