package worker

import (
	"testing"
	"time"
)

// wait returns the next signal, failing the test if none comes within
// 10 s (a guard against a hang, not a wait for time to pass).
func (s *testSignal[T]) wait(t testing.TB) T {
	t.Helper()
	select {
	case v := <-s.ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no test signal within 10 s")
		var zero T
		return zero
	}
}

// waitDone waits for done to close, failing the test after 10 s.
func waitDone(t testing.TB, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not end within 10 s", what)
	}
}
