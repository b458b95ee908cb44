// Package member holds the tests of the member library (actors/member)
// against running cohortd clusters, franz-go's kfake and kgo members in the
// same group. They live in the cluster-test module, beside the harness that
// starts the clusters, so that the cohort module does not require kfake; the
// tests that need only an in-process node stay in actors/member.
package member
