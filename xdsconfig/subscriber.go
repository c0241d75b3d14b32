package xdsconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/peerlimit/peerlimit/envoyrls"
)

// TypeURL is the resource type subscribed to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// maxNackBytes bounds the reason sent with a NACK: a configuration with
// thousands of errors must not make a message the control plane refuses.
const maxNackBytes = 4096

// Update is one state of the world: every RateLimitConfig resource the
// control plane serves, as documents, in the order it sent them.
type Update struct {
	// Version is the control plane's version_info of the response.
	Version   string
	Documents []envoyrls.Document
}

// Target puts configurations in force. The Subscriber calls Apply from
// its one goroutine, so never concurrently, and waits for it: Apply
// should parse and swap, not block. An error refuses the update (it is
// NACKed with the error's text); the Target must then keep the
// configuration in force.
type Target interface {
	Apply(Update) error
}

// Subscriber holds one subscription; Run drives it.
type Subscriber struct {
	cfg     Config
	target  Target
	log     *slog.Logger
	metrics *metrics
}

// New checks cfg and registers the subscription's metrics with reg.
func New(cfg Config, target Target, reg prometheus.Registerer, log *slog.Logger) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("xds: no ServerAddr")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Subscriber{cfg: cfg, target: target, log: log.With("xds_server", cfg.ServerAddr), metrics: m}, nil
}

// Source names the control plane, for RuleSet.Source and logs.
func (s *Subscriber) Source() string { return s.cfg.Source() }

// Run subscribes until ctx is done, opening the stream again after every
// failure with a jittered exponential backoff.
func (s *Subscriber) Run(ctx context.Context) {
	wait := s.cfg.BackoffInitial
	for {
		delivered, err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			wait = s.cfg.BackoffInitial
		}
		pause := wait/2 + rand.N(wait/2+1)
		s.log.Warn("xds: stream to the control plane ended; the configuration in force is kept", "err", err, "retry_in", pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, s.cfg.BackoffMax)
	}
}

// session runs one stream: connect, ask, then apply and answer each
// response until the stream breaks. It reports whether any response was
// put in force.
//
// Each session dials its own connection and closes it at the end. That
// is what re-reads the TLS files, so that rotated certificates are used
// on the next stream, and it costs one handshake per broken stream,
// which the backoff paces; a connection kept across sessions would hold
// its first certificates for the life of the process.
func (s *Subscriber) session(ctx context.Context) (delivered bool, err error) {
	conn, err := s.dial()
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(s.outgoing(ctx))
	defer cancel()
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("xds: opening the stream: %w", err)
	}
	node := s.node()
	acked := "" // the version in force, sent back with every answer
	if err := stream.Send(&discoverypb.DiscoveryRequest{Node: node, TypeUrl: TypeURL}); err != nil {
		return false, fmt.Errorf("xds: subscribing: %w", err)
	}
	s.metrics.connected.Set(1)
	defer s.metrics.connected.Set(0)
	s.log.Info("xds: subscribed", "node_id", node.GetId(), "type", TypeURL)
	silent := s.warnIfSilent(node.GetId())
	defer silent.Stop()
	var refused refusal
	for {
		resp, err := stream.Recv()
		if err != nil {
			return delivered, fmt.Errorf("xds: receiving: %w", err)
		}
		silent.Stop()
		answer := &discoverypb.DiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		if err := refused.again(ctx, resp, s.cfg.NackPause); err != nil {
			s.metrics.responses.WithLabelValues("nack").Inc()
			answer.VersionInfo, answer.ErrorDetail = acked, nack(err)
		} else if err := s.apply(resp); err != nil {
			refused.remember(resp, err)
			answer.VersionInfo, answer.ErrorDetail = acked, nack(err)
		} else {
			refused = refusal{}
			acked, answer.VersionInfo, delivered = resp.GetVersionInfo(), resp.GetVersionInfo(), true
		}
		if err := stream.Send(answer); err != nil {
			return delivered, fmt.Errorf("xds: answering version %q: %w", resp.GetVersionInfo(), err)
		}
	}
}

// warnIfSilent logs one warning if the stream just opened gets no
// response within Config.NoResponseWarning; the caller stops the timer
// at the first response. A control plane answers a node id it has a
// snapshot for at once, and keeps the stream open and silent for any
// other: without this, a wrong node id would look like a healthy stream.
// (go-control-plane's cache also sends nothing to a new stream while its
// snapshot has no resources of the type, as Envoy Gateway's has none
// once its last Gateway is deleted; the warning says so.)
func (s *Subscriber) warnIfSilent(nodeID string) *time.Timer {
	return time.AfterFunc(s.cfg.NoResponseWarning, func() {
		s.log.Warn("xds: the control plane has sent no configuration since the stream opened; does the control plane serve this node id? "+
			"(it sends nothing to an id it has no snapshot for, nor, on a new stream, an empty snapshot)",
			"node_id", nodeID, "waited", s.cfg.NoResponseWarning)
	})
}

// refusal remembers the last configuration refused on a stream.
//
// A state-of-the-world server answers a NACK at once with its current
// snapshot, which is the one refused until the control plane changes it:
// go-control-plane's snapshot cache, which Envoy Gateway's controller
// uses, answers every request whose version differs from its own. Left
// alone, client and server would exchange the same refusal as fast as
// the link allows. So the same resources refused again are answered with
// the same NACK after a pause (Config.NackPause), without parsing or
// logging them again: at most one exchange per pause, and a fixed
// configuration is taken up at most one pause late.
type refusal struct {
	sum [sha256.Size]byte
	err error
}

func (r *refusal) remember(resp *discoverypb.DiscoveryResponse, err error) {
	r.sum, r.err = resourcesSum(resp), err
}

// again returns the refusal's error, after the pause, when resp holds the
// resources last refused; nil otherwise.
func (r *refusal) again(ctx context.Context, resp *discoverypb.DiscoveryResponse, pause time.Duration) error {
	if r.err == nil || resourcesSum(resp) != r.sum {
		return nil
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return r.err
}

// resourcesSum digests the resources as a set: a snapshot cache may
// send the same resources in another order each time.
func resourcesSum(resp *discoverypb.DiscoveryResponse) [sha256.Size]byte {
	sums := make([][sha256.Size]byte, 0, len(resp.GetResources()))
	for _, res := range resp.GetResources() {
		h := sha256.New()
		fmt.Fprintf(h, "%d:%s%d:", len(res.GetTypeUrl()), res.GetTypeUrl(), len(res.GetValue()))
		h.Write(res.GetValue())
		var sum [sha256.Size]byte
		sums = append(sums, [sha256.Size]byte(h.Sum(sum[:0])))
	}
	slices.SortFunc(sums, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, sum := range sums {
		h.Write(sum[:])
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// apply hands one response to the Target, counting and logging the
// outcome.
func (s *Subscriber) apply(resp *discoverypb.DiscoveryResponse) error {
	u, err := decode(resp)
	if err == nil {
		err = s.target.Apply(u)
	}
	if err != nil {
		s.metrics.responses.WithLabelValues("nack").Inc()
		s.log.Error("xds: configuration refused (NACK); the configuration in force is kept", "version", resp.GetVersionInfo(), "err", err)
		return err
	}
	s.metrics.responses.WithLabelValues("ack").Inc()
	s.log.Info("xds: configuration in force (ACK)", "version", u.Version, "resources", len(u.Documents))
	return nil
}

// decode turns a response's resources into documents.
func decode(resp *discoverypb.DiscoveryResponse) (Update, error) {
	if resp.GetTypeUrl() != TypeURL {
		return Update{}, fmt.Errorf("xds: response of type %q; subscribed to %q", resp.GetTypeUrl(), TypeURL)
	}
	u := Update{Version: resp.GetVersionInfo(), Documents: make([]envoyrls.Document, 0, len(resp.GetResources()))}
	var b budget // over the whole response, as the parser's limits are over a load
	for i, res := range resp.GetResources() {
		if res.GetTypeUrl() != TypeURL {
			return Update{}, fmt.Errorf("xds: resource %d is of type %q, not %q", i, res.GetTypeUrl(), TypeURL)
		}
		var c rlsconfpb.RateLimitConfig
		if err := proto.Unmarshal(res.GetValue(), &c); err != nil {
			return Update{}, fmt.Errorf("xds: resource %d: %w", i, err)
		}
		doc, err := b.document(&c)
		if err != nil {
			return Update{}, err
		}
		u.Documents = append(u.Documents, doc)
	}
	// In name order, as a directory's files are read: the order decides
	// which wildcard of merged domains comes first and the digest, and a
	// snapshot cache sends the resources in map order, which differs
	// from one response and one node to the next.
	slices.SortFunc(u.Documents, func(a, b envoyrls.Document) int { return strings.Compare(a.Name, b.Name) })
	return u, nil
}

func nack(err error) *statuspb.Status {
	msg := err.Error()
	if len(msg) > maxNackBytes {
		// At a character's boundary: a proto3 string must be UTF-8, or
		// the NACK fails to marshal and is never sent.
		msg = strings.ToValidUTF8(msg[:maxNackBytes], "") + "…"
	}
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg}
}

// dial makes the connection; TLS files are read each time.
func (s *Subscriber) dial() (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if s.cfg.UseTLS {
		t, err := s.cfg.tlsConfig()
		if err != nil {
			return nil, err
		}
		if t.ServerName == "" {
			t.ServerName, _, _ = net.SplitHostPort(s.cfg.ServerAddr)
		}
		creds = credentials.NewTLS(t)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.cfg.MaxRecvMsgBytes)),
	}
	if s.cfg.KeepaliveTime > 0 {
		// Only while the stream is open: a gRPC server's default policy
		// counts pings on a connection without streams against it too.
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: s.cfg.KeepaliveTime, Timeout: 10 * time.Second}))
	}
	conn, err := grpc.NewClient(s.cfg.ServerAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("xds: dialling %s: %w", s.cfg.ServerAddr, err)
	}
	return conn, nil
}

func (s *Subscriber) outgoing(ctx context.Context) context.Context {
	if len(s.cfg.Headers) == 0 {
		return ctx
	}
	md := metadata.MD{}
	for k, v := range s.cfg.Headers {
		md.Append(k, v)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

func (s *Subscriber) node() *corepb.Node {
	n := &corepb.Node{Id: s.cfg.NodeID, UserAgentName: "peerlimit"}
	if len(s.cfg.NodeMetadata) > 0 {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range s.cfg.NodeMetadata {
			n.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	return n
}

type metrics struct {
	responses *prometheus.CounterVec
	connected prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_xds_responses_total",
			Help: "Responses of the xDS control plane, by result: ack (put in force) or nack (refused; the configuration in force was kept)."},
			[]string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "envoy_rls_xds_connected",
			Help: "1 while the stream to the xDS control plane is open, 0 while the node reconnects."}),
	}
	m.responses.WithLabelValues("ack")
	m.responses.WithLabelValues("nack")
	for _, c := range []prometheus.Collector{m.responses, m.connected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("xds: metrics: %w", err)
		}
	}
	return m, nil
}
