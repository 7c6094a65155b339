package inbox

// SetAfterStore gives the conformance suite's HTTP harness the hook that
// drops a request after its commit (see HTTP.afterStore).
func SetAfterStore(h *HTTP, f func() error) { h.afterStore = f }
