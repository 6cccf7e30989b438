package agent

// capture keeps the first and last bytes of a stream within a fixed budget:
// limit/2 bytes of head and limit/2 bytes of tail (a ring). Memory is bounded
// by limit whatever the program prints.
type capture struct {
	limit int
	head  []byte
	ring  []byte // tail ring, allocated on first overflow
	pos   int    // next write position in ring
	full  bool   // ring has wrapped
	total int64
}

func newCapture(limit int) *capture {
	if limit <= 0 {
		limit = 1 << 20
	}
	return &capture{limit: limit}
}

// Write never fails; it implements io.Writer for the pipe drainer.
func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	headCap := c.limit - c.limit/2
	if c.ring == nil {
		// Everything fits so far: keep it all in head until limit, so an
		// untruncated stream is exactly the bytes written.
		if len(c.head)+len(p) <= c.limit {
			c.head = appendBounded(c.head, p, c.limit)
			return n, nil
		}
		// Overflow: head keeps headCap bytes; the rest moves to the ring.
		spill := append(c.head[min(headCap, len(c.head)):len(c.head):len(c.head)], p...)
		c.head = c.head[:min(headCap, len(c.head))]
		if len(c.head) < headCap {
			k := min(headCap-len(c.head), len(spill))
			c.head = append(c.head, spill[:k]...)
			spill = spill[k:]
		}
		c.ring = make([]byte, c.limit/2)
		c.writeRing(spill)
		return n, nil
	}
	c.writeRing(p)
	return n, nil
}

// appendBounded appends p to b, growing b's capacity by doubling but never
// past limit (append's own growth could reserve a quarter more than the
// limit, and the limit is what the container's memory budget counts).
func appendBounded(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), need, 4096), max(limit, need)))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

func (c *capture) writeRing(p []byte) {
	if len(c.ring) == 0 {
		return
	}
	if len(p) >= len(c.ring) {
		copy(c.ring, p[len(p)-len(c.ring):])
		c.pos = 0
		c.full = true
		return
	}
	k := copy(c.ring[c.pos:], p)
	if k < len(p) {
		copy(c.ring, p[k:])
		c.pos = len(p) - k
		c.full = true
	} else {
		c.pos += k
		if c.pos == len(c.ring) {
			c.pos = 0
			c.full = true
		}
	}
}

func (c *capture) output() Output {
	o := Output{Head: c.head, Total: c.total}
	if c.ring == nil {
		return o
	}
	o.Truncated = true
	if c.full {
		o.Tail = append(append([]byte{}, c.ring[c.pos:]...), c.ring[:c.pos]...)
	} else {
		o.Tail = append([]byte{}, c.ring[:c.pos]...)
	}
	return o
}
