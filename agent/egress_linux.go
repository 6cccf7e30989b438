//go:build linux

package agent

import (
	"errors"
	"net"
	"sync"
)

// egressChunk bounds one frame's data.
const egressChunk = 32 << 10

// egress relays the connections steps make to a run's Egress address to
// the worker, as OpEgress frames, and the worker's answers back.
type egress struct {
	l     net.Listener
	enc   *Encoder
	runID uint64
	mu    sync.Mutex
	next  uint64
	conns map[uint64]net.Conn
	wg    sync.WaitGroup
}

// startEgress listens on addr for the run runID.
func startEgress(addr string, runID uint64, enc *Encoder) (*egress, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	e := &egress{l: l, enc: enc, runID: runID, conns: map[uint64]net.Conn{}}
	e.wg.Add(1)
	go e.accept()
	return e, nil
}

func (e *egress) accept() {
	defer e.wg.Done()
	for {
		c, err := e.l.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.next++
		id := e.next
		e.conns[id] = c
		e.mu.Unlock()
		if err := e.enc.Encode(Response{ID: e.runID, Op: OpEgress, Egress: &EgressFrame{Conn: id, Open: true}}); err != nil {
			c.Close()
			return
		}
		e.wg.Add(1)
		go e.pump(id, c)
	}
}

// pump sends what the step writes on c to the worker.
func (e *egress) pump(id uint64, c net.Conn) {
	defer e.wg.Done()
	buf := make([]byte, egressChunk)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if e.enc.Encode(Response{ID: e.runID, Op: OpEgress, Egress: &EgressFrame{Conn: id, Data: buf[:n]}}) != nil {
				return
			}
		}
		if err != nil {
			_ = e.enc.Encode(Response{ID: e.runID, Op: OpEgress, Egress: &EgressFrame{Conn: id, Close: true}})
			e.drop(id)
			return
		}
	}
}

// deliver applies a frame from the worker: data for a connection, or its
// end.
func (e *egress) deliver(f *EgressFrame) {
	e.mu.Lock()
	c := e.conns[f.Conn]
	e.mu.Unlock()
	if c == nil {
		return
	}
	if len(f.Data) > 0 {
		if _, err := c.Write(f.Data); err != nil {
			e.drop(f.Conn)
			return
		}
	}
	if f.Close {
		// The worker's side is done: no more data for the step. Its
		// reads end; what the step still writes is dropped.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			e.drop(f.Conn)
		}
	}
}

func (e *egress) drop(id uint64) {
	e.mu.Lock()
	c := e.conns[id]
	delete(e.conns, id)
	e.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// stop ends the listener and every connection.
func (e *egress) stop() {
	err := e.l.Close()
	e.mu.Lock()
	for id, c := range e.conns {
		c.Close()
		delete(e.conns, id)
	}
	e.mu.Unlock()
	if err == nil || errors.Is(err, net.ErrClosed) {
		e.wg.Wait()
	}
}
