package core

// deque is a ring buffer of message references: O(1) at both ends, and
// O(n) removal from the middle, which message groups and selectors need,
// and binary search by seq.
type deque struct {
	buf  []*ref
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) at(i int) *ref { return d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *deque) grow() {
	size := len(d.buf) * 2
	if size == 0 {
		size = 16
	}
	nb := make([]*ref, size)
	for i := 0; i < d.n; i++ {
		nb[i] = d.at(i)
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(r *ref) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = r
	d.n++
}

func (d *deque) pushFront(r *ref) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = r
	d.n++
}

// removeAt removes and returns element i, shifting the shorter side.
func (d *deque) removeAt(i int) *ref {
	mask := len(d.buf) - 1
	r := d.at(i)
	if i < d.n/2 {
		for j := i; j > 0; j-- {
			d.buf[(d.head+j)&mask] = d.buf[(d.head+j-1)&mask]
		}
		d.buf[d.head] = nil
		d.head = (d.head + 1) & mask
	} else {
		for j := i; j < d.n-1; j++ {
			d.buf[(d.head+j)&mask] = d.buf[(d.head+j+1)&mask]
		}
		d.buf[(d.head+d.n-1)&mask] = nil
	}
	d.n--
	if d.n == 0 {
		d.head = 0
	}
	return r
}

// search returns the index of the first element whose seq is at least
// seq (d.len() if none). A queue keeps each ready list sorted by seq.
func (d *deque) search(seq uint64) int {
	lo, hi := 0, d.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if d.at(m).seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// insertOrdered puts r before the first element with a larger seq, so
// returned messages go back where they were relative to the others.
func (d *deque) insertOrdered(r *ref) {
	i := d.search(r.seq)
	if i == 0 {
		d.pushFront(r)
		return
	}
	d.pushBack(r)
	mask := len(d.buf) - 1
	for j := d.n - 1; j > i; j-- {
		d.buf[(d.head+j)&mask] = d.buf[(d.head+j-1)&mask]
	}
	d.buf[(d.head+i)&mask] = r
}

// schedHeap orders scheduled references by due time, then by seq.
type schedHeap []*ref

func (h schedHeap) less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}

func (h *schedHeap) push(r *ref) {
	*h = append(*h, r)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// init restores the heap order after arbitrary changes.
func (h schedHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h schedHeap) down(i int) {
	for {
		l, rr, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if rr < len(h) && h.less(rr, m) {
			m = rr
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (h *schedHeap) pop() *ref {
	s := *h
	r := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = nil
	s = s[:last]
	for i := 0; ; {
		l, rr, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if rr < len(s) && s.less(rr, m) {
			m = rr
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return r
}
