package worker

// testSignal lets a test wait for a point in the code under test instead
// of sleeping (River's testsignal): signal does nothing unless the test
// called init first. The test's wait is in testsignal_test.go.
type testSignal[T any] struct{ ch chan T }

// init makes s record its signals; only tests call it.
func (s *testSignal[T]) init() { s.ch = make(chan T, 64) }

// signal records v for a waiting test. A test that lets signals pile up
// past the buffer is broken: it panics rather than block the code.
func (s *testSignal[T]) signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic("worker: test signal buffer full")
	}
}
