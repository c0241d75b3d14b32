// Package reloads numbers the reloads of a configuration file, so that
// outcomes recorded after the fact can be put in the order the files
// were read.
package reloads

// Result is how one reload went.
type Result struct {
	// Seq numbers the reloads from 1 in the order they read the files
	// (a registry serialises them): of two results, the higher Seq read
	// later, and says what the files hold now. 0 is no reload yet, or an
	// outcome nobody numbered.
	Seq uint64
	// Err is why the reload failed, nil when it put what it read in
	// force (or found it in force already).
	Err error
}

// Next is the result of the reload after r, which ended with err.
func (r Result) Next(err error) Result { return Result{Seq: r.Seq + 1, Err: err} }
