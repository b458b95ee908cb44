// Package testlog holds what tests use to read the logs of the code they
// run.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a log destination a test reads while other goroutines write to
// it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
