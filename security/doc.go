// Package security holds the mechanics of who may talk to cohort and what
// they may do, with Kafka's model: SASL sessions (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512; the SCRAM exchange is github.com/xdg-go/scram), SCRAM
// credentials kept as salted keys (StoredKey, ServerKey), never passwords,
// ACL bindings and the authorizer that applies them, and the Kafka listeners
// per security protocol.
//
// The replicated state (credentials and bindings) lives in a Store that the
// Raft FSM changes in log order; the Kafka listener reads it to authenticate
// and authorize. PLAIN checks a password against the stored SCRAM
// credential of the user (SHA-512 first, then SHA-256): there is one set of
// users, managed with AlterUserScramCredentials.
package security
