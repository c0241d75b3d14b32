package limiter

// Admin is a Store's operator calls: Inspect and HotKeys read the state,
// Delete, DeleteLimit and DeleteKey reset it. Get it with Store.Admin. It
// is safe for concurrent use, with itself and with every other call on
// the Store; its calls lock one partition at a time, and some scan it
// under the lock (DeleteKey, Inspect), which suits an operator's call,
// not a request path.
type Admin struct {
	cfg    *Config
	shards shards
}
