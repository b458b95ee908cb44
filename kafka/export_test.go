package kafka

// SampleRequest is sampleRequest for the external tests.
var SampleRequest = sampleRequest
