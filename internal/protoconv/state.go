package protoconv

import (
	"math"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// ToProtoKeyState converts a key's state for handoff and replication: a
// log as one base time and 32-bit offsets from it.
func ToProtoKeyState(s limiter.KeyState) *pb.KeyState {
	out := &pb.KeyState{Key: s.Key, WindowMs: s.Window.Milliseconds(), Algorithm: pb.Algorithm(s.Algorithm),
		WindowId: s.WindowID, Prev: s.Prev, Curr: s.Curr, TatNs: s.TAT}
	out.Calendar, out.TimeZone = CalendarToProto(s.Calendar)
	if len(s.Log) > 0 {
		out.LogBaseMs, out.LogOffsetsMs = logOffsets(s.Log)
	}
	out.LogTags = s.Tags
	return out
}

// logOffsets returns a log as its first time and 32-bit offsets from it.
func logOffsets(log []int64) (base int64, offs []uint32) {
	offs = make([]uint32, len(log))
	for i, t := range log {
		offs[i] = uint32(min(t-log[0], math.MaxUint32))
	}
	return log[0], offs
}

// FromProtoKeyState converts a received key state; the store validates it.
func FromProtoKeyState(s *pb.KeyState) limiter.KeyState {
	out := limiter.KeyState{Key: s.GetKey(), WindowID: s.GetWindowId(), Prev: s.GetPrev(), Curr: s.GetCurr(), TAT: s.GetTatNs(),
		Tags: s.GetLogTags()}
	var log []int64
	if offs := s.GetLogOffsetsMs(); len(offs) > 0 {
		log = make([]int64, len(offs))
		for i, o := range offs {
			log[i] = int64(o)
		}
	}
	setKeyState(&out, s.GetWindowMs(), int32(s.GetAlgorithm()), s.GetCalendar(), s.GetTimeZone(), s.GetLogBaseMs(), log)
	return out
}

// setKeyState sets what a received state's fields convert to: the
// algorithm (an unknown one kept for the store to refuse), the window,
// the calendar, and the log, its offsets (in place) moved onto its base.
// FromProtoKeyState's rules, for it and for DecodeReplicate.
func setKeyState(ks *limiter.KeyState, windowMS int64, algo int32, unit pb.CalendarUnit, zone string, base int64, offsets []int64) {
	ks.Algorithm = limiter.Algorithm(min(max(algo, 0), 255))
	if windowMS > 0 && windowMS <= math.MaxInt64/int64(time.Millisecond) {
		ks.Window = time.Duration(windowMS) * time.Millisecond
	}
	ks.Calendar = calendarFromMember(unit, zone)
	if len(offsets) > 0 {
		for i := range offsets {
			offsets[i] += base
		}
		ks.Log = offsets
	}
}

// ToProtoKeyStates converts states for the wire, in one allocation: a
// replication round sends thousands.
func ToProtoKeyStates(states []limiter.KeyState) []*pb.KeyState {
	out := make([]*pb.KeyState, len(states))
	slab := make([]pb.KeyState, len(states))
	for i, s := range states {
		m := &slab[i]
		m.Key, m.WindowMs, m.Algorithm = s.Key, s.Window.Milliseconds(), pb.Algorithm(s.Algorithm)
		m.WindowId, m.Prev, m.Curr, m.TatNs = s.WindowID, s.Prev, s.Curr, s.TAT
		if s.Calendar != 0 {
			m.Calendar, m.TimeZone = CalendarToProto(s.Calendar)
		}
		if len(s.Log) > 0 {
			m.LogBaseMs, m.LogOffsetsMs = logOffsets(s.Log)
		}
		m.LogTags = s.Tags
		out[i] = m
	}
	return out
}

// FromProtoKeyStates converts received states.
func FromProtoKeyStates(states []*pb.KeyState) []limiter.KeyState {
	out := make([]limiter.KeyState, len(states))
	for i, s := range states {
		out[i] = FromProtoKeyState(s)
	}
	return out
}

// ToProtoReplicate converts a replication round's call from origin.
func ToProtoReplicate(origin string, r peer.Replication) *pb.ReplicateRequest {
	out := &pb.ReplicateRequest{Origin: origin, States: ToProtoKeyStates(r.States), Whole: make([]uint32, len(r.Whole)),
		Boot: r.Boot, SentUnixMs: SentToProto(r.Sent)}
	for i, w := range r.Whole {
		out.Whole[i] = uint32(w)
	}
	return out
}

// FromProtoReplicate converts a received replication.
func FromProtoReplicate(in *pb.ReplicateRequest) peer.Replication {
	r := peer.Replication{Sent: SentFromProto(in.GetSentUnixMs()), States: FromProtoKeyStates(in.GetStates()),
		Whole: make([]int, len(in.GetWhole())), Boot: in.GetBoot()}
	for i, w := range in.GetWhole() {
		r.Whole[i] = int(w)
	}
	return r
}

// ToProtoReplicated converts a backup's answer.
func ToProtoReplicated(r peer.Replicated) *pb.ReplicateResponse {
	out := &pb.ReplicateResponse{Kept: uint32(r.Kept), Unsynced: make([]uint32, len(r.Unsynced)), Boot: r.Boot}
	for i, p := range r.Unsynced {
		out.Unsynced[i] = uint32(p)
	}
	return out
}

// FromProtoReplicated converts a backup's answer. Its partitions are
// the backup's word: the sender checks them against its own count.
func FromProtoReplicated(in *pb.ReplicateResponse) peer.Replicated {
	r := peer.Replicated{Kept: int(in.GetKept()), Unsynced: make([]int, len(in.GetUnsynced())), Boot: in.GetBoot()}
	for i, p := range in.GetUnsynced() {
		r.Unsynced[i] = int(p)
	}
	return r
}

// ToProtoHandoff converts a handoff's call from origin.
func ToProtoHandoff(origin string, h peer.Handoff) *pb.HandoffRequest {
	return &pb.HandoffRequest{Origin: origin, States: ToProtoKeyStates(h.States), SentUnixMs: SentToProto(h.Sent)}
}

// FromProtoHandoff converts a received handoff.
func FromProtoHandoff(in *pb.HandoffRequest) peer.Handoff {
	return peer.Handoff{Sent: SentFromProto(in.GetSentUnixMs()), States: FromProtoKeyStates(in.GetStates())}
}

// SentToProto converts a call's sent stamp (HandoffRequest.sent_unix_ms,
// ReplicateRequest.sent_unix_ms): the zero time, no stamp, is 0 (as is a
// clock reading the epoch's very millisecond, which no node's does).
func SentToProto(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// SentFromProto converts a received sent stamp: 0, a sender from before
// the stamp, is the zero time (no rebase). The server refuses a negative
// one before converting it.
func SentFromProto(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// maxLeaseOffset bounds a settled hit's offset from its lease's asking:
// no lease lasts an hour, and the bound keeps a conversion from wrapping.
const maxLeaseOffset = time.Hour

// ToProtoLeaseUses converts a holder's settlements.
func ToProtoLeaseUses(uses []peer.LeaseUse) []*pb.LeaseUse {
	out := make([]*pb.LeaseUse, len(uses))
	for i, u := range uses {
		pu := &pb.LeaseUse{Id: u.ID, Used: u.Used, OffsetsMs: make([]int64, len(u.Offsets))}
		for j, o := range u.Offsets {
			pu.OffsetsMs[j] = o.Milliseconds()
		}
		out[i] = pu
	}
	return out
}

// FromProtoLeaseUses converts received settlements, each offset clamped
// to [0, 1 h].
func FromProtoLeaseUses(uses []*pb.LeaseUse) []peer.LeaseUse {
	out := make([]peer.LeaseUse, len(uses))
	for i, u := range uses {
		out[i] = peer.LeaseUse{ID: u.GetId(), Used: u.GetUsed(), Offsets: make([]time.Duration, len(u.GetOffsetsMs()))}
		for j, o := range u.GetOffsetsMs() {
			out[i].Offsets[j] = time.Duration(min(max(o, 0), maxLeaseOffset.Milliseconds())) * time.Millisecond
		}
	}
	return out
}

// FromProtoLeaseWant is the lease a received request asks for: its hits
// (negative: none) and duration, clamped to [0, 1 h] (0: the sender
// asked for none, an older member: the owner's own duration).
func FromProtoLeaseWant(in *pb.LeaseRequest) peer.LeaseWant {
	return peer.LeaseWant{Hits: max(in.GetWant(), 0),
		Duration: time.Duration(min(max(in.GetDurationMs(), 0), maxLeaseOffset.Milliseconds())) * time.Millisecond}
}

// ToProtoLease converts an owner's answer to a lease request.
func ToProtoLease(res peer.Result, g peer.LeaseGrant) *pb.LeaseResponse {
	return &pb.LeaseResponse{Result: ToProtoResult(res), Id: g.ID, Hits: g.Hits, DurationMs: g.Duration.Milliseconds(),
		ResetAfterMs: g.ResetAfter.Milliseconds(), RefillAfterMs: g.RefillAfter.Milliseconds()}
}

// maxLeaseDuration is more than any version lends; a longer grant is not
// taken.
const maxLeaseDuration = time.Minute

// FromProtoLease converts an owner's answer to a lease request. A grant
// no version of peerlimit makes (negative, or longer than a minute) is
// taken as none.
func FromProtoLease(resp *pb.LeaseResponse) (peer.Result, peer.LeaseGrant) {
	g := peer.LeaseGrant{ID: resp.GetId(), Hits: resp.GetHits(), Duration: time.Duration(resp.GetDurationMs()) * time.Millisecond,
		ResetAfter: time.Duration(resp.GetResetAfterMs()) * time.Millisecond, RefillAfter: time.Duration(resp.GetRefillAfterMs()) * time.Millisecond}
	if g.Hits < 0 || g.Duration < 0 || g.Duration > maxLeaseDuration {
		g = peer.LeaseGrant{}
	}
	return FromProtoResult(resp.GetResult()), g
}
