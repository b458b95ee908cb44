package actors

import "time"

// Clock is the time source of the group actors.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer armed by a Clock.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// SystemClock is the real clock (virtual inside a testing/synctest bubble).
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
