package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// CompletionRequest is what a caller posts to /v1/completions: the shape
// of the common LLM APIs, cut down to what the budget needs.
type CompletionRequest struct {
	Prompt string `json:"prompt"`
	// MaxTokens bounds the answer: what the proxy reserves.
	MaxTokens int64 `json:"max_tokens"`
}

// Model is a fake streaming model server. POST /v1/completions answers a
// Server-Sent Events stream of tokens, one "data: <token>" event each,
// then "data: [DONE]". How many is the model's choice, as a real model's
// is: uniform in [1, max_tokens], from a seeded generator. Safe for
// concurrent use.
type Model struct {
	// TokenDelay is the time between two tokens.
	TokenDelay time.Duration

	mu  sync.Mutex
	rng *rand.Rand
}

// NewModel returns a Model whose answer lengths follow seed.
func NewModel(seed uint64, tokenDelay time.Duration) *Model {
	return &Model{TokenDelay: tokenDelay, rng: rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))}
}

var words = []string{"the", "budget", "holds", "under", "load", "and", "every", "token", "is", "paid", "for"}

func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.MaxTokens < 1 {
		http.Error(w, "want JSON with max_tokens ≥ 1", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	n := 1 + m.rng.Int64N(req.MaxTokens)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	flush := http.NewResponseController(w).Flush
	for i := range n {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", words[i%int64(len(words))]); err != nil {
			return // the caller went away: the model stops generating
		}
		_ = flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(m.TokenDelay):
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
