// Package windowed counts admissions the way a limit is judged: the most
// that fall in one window, for tests that drive a key and check it never
// admitted more than its limit.
package windowed

import "time"

// MostInAWindow returns the most of admitted (sorted) that fall in one
// window of w, and where that window starts: any window if sliding, else
// the fixed windows that start at multiples of w.
func MostInAWindow(admitted []time.Time, w time.Duration, sliding bool) (most int, from time.Time) {
	fixed := func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli() - t.UnixMilli()%w.Milliseconds()) }
	for i, a := range admitted {
		lo := a
		if !sliding {
			lo = fixed(a)
			if i > 0 && fixed(admitted[i-1]).Equal(lo) {
				continue // counted from the window's first admission
			}
		}
		n := 0
		for _, b := range admitted {
			if !b.Before(lo) && b.Before(lo.Add(w)) {
				n++
			}
		}
		if n > most {
			most, from = n, lo
		}
	}
	return most, from
}
