package protoconv

import (
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// DecodeReplicate decodes a peerlimit.v1.ReplicateRequest's bytes straight
// into the peer.Replication a backup applies, and its origin: what
// UnmarshalVT followed by FromProtoReplicate gives, without a message
// object for each state. A round over uniform keys carries thousands of
// states, and those objects were most of what a backup allocated for it
// (docs/benchmarks.md, "Replicas: what a round costs"). The states share
// one allocation; each key, log and tag list has its own, as the store
// keeps them.
//
// It accepts nothing UnmarshalVT refuses (FuzzDecodeReplicateMatchesVT);
// it is stricter on malformed groups, which no member sends. An error
// names the field it stopped at.
func DecodeReplicate(data []byte) (origin string, r peer.Replication, err error) {
	// Sized once for what a sender's chunk holds; an empty state costs 2
	// bytes on the wire and ~140 here, so the count is capped (append
	// grows past it) lest a few bytes claim a large allocation at once.
	r.States = make([]limiter.KeyState, 0, min(countField(data, 2), maxPresized))
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return "", peer.Replication{}, wireError("replicate", parseError(n))
		}
		data = data[n:]
		switch num {
		case 1:
			origin, n = consumeString(typ, data)
		case 2:
			var ks limiter.KeyState
			ks, n, err = consumeKeyState(typ, data)
			if err != nil {
				return "", peer.Replication{}, fmt.Errorf("states[%d]: %w", len(r.States), err)
			}
			r.States = append(r.States, ks)
		case 3:
			n = consumeUint32s(typ, data, func(v uint32) { r.Whole = append(r.Whole, int(v)) })
		case 4:
			r.Boot, n = consumeString(typ, data)
		case 5:
			var ms int64
			ms, n = consumeInt64(typ, data)
			r.Sent = SentFromProto(ms)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return "", peer.Replication{}, wireError(replicateFields[min(int(num), len(replicateFields)-1)], parseError(n))
		}
		data = data[n:]
	}
	return origin, r, nil
}

// maxPresized caps the states DecodeReplicate allocates before reading
// them: a chunk under limiter.ChunkBytes of counters holds fewer.
const maxPresized = 1 << 15

// replicateFields names ReplicateRequest's fields by number, for errors.
var replicateFields = []string{"replicate", "origin", "states", "whole", "boot", "sent_unix_ms", "replicate"}

// keyStateFields names KeyState's fields by number, for errors.
var keyStateFields = []string{"state", "key", "window_ms", "algorithm", "window_id", "prev", "curr", "log_base_ms",
	"log_offsets_ms", "calendar", "time_zone", "tat_ns", "log_tags", "state"}

// consumeKeyState decodes one KeyState field value, as FromProtoKeyState
// converts the message.
func consumeKeyState(typ protowire.Type, data []byte) (limiter.KeyState, int, error) {
	if typ != protowire.BytesType {
		return limiter.KeyState{}, errCodeWireType, nil
	}
	b, size := protowire.ConsumeBytes(data)
	if size < 0 {
		return limiter.KeyState{}, size, nil
	}
	var (
		ks             limiter.KeyState
		windowMS, base int64
		algo, unit     int32
		zone           string
		offsets        []int64
	)
	for len(b) > 0 {
		num, t, n := protowire.ConsumeTag(b)
		if n < 0 {
			return limiter.KeyState{}, -1, wireError("state", parseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			ks.Key, n = consumeString(t, b)
		case 2:
			windowMS, n = consumeInt64(t, b)
		case 3:
			algo, n = consumeInt32(t, b)
		case 4:
			ks.WindowID, n = consumeInt64(t, b)
		case 5:
			ks.Prev, n = consumeInt64(t, b)
		case 6:
			ks.Curr, n = consumeInt64(t, b)
		case 7:
			base, n = consumeInt64(t, b)
		case 8:
			n = consumeUint32s(t, b, func(v uint32) { offsets = append(offsets, int64(v)) })
		case 9:
			unit, n = consumeInt32(t, b)
		case 10:
			zone, n = consumeString(t, b)
		case 11:
			ks.TAT, n = consumeInt64(t, b)
		case 12:
			n = consumeUint32s(t, b, func(v uint32) { ks.Tags = append(ks.Tags, v) })
		default:
			n = protowire.ConsumeFieldValue(num, t, b)
		}
		if n < 0 {
			return limiter.KeyState{}, -1, wireError(keyStateFields[min(int(num), len(keyStateFields)-1)], parseError(n))
		}
		b = b[n:]
	}
	setKeyState(&ks, windowMS, algo, pb.CalendarUnit(unit), zone, base, offsets)
	return ks, size, nil
}

// errCodeWireType is what a consume function returns for a known field
// sent with another wire type than its own, which UnmarshalVT refuses
// too; protowire's own codes are -1 to -9 or so.
const errCodeWireType = -100

// parseError is the error of a consume function's negative n.
func parseError(n int) error {
	if n == errCodeWireType {
		return errors.New("wrong wire type")
	}
	return protowire.ParseError(n)
}

// wireError names the field a decode stopped at, as a limiter.ArgumentError
// (INVALID_ARGUMENT naming it, where a server answers with it).
func wireError(field string, err error) error {
	return &limiter.ArgumentError{Field: field, Reason: "malformed: " + err.Error()}
}

// consumeString decodes a string field's value, copied out of data.
func consumeString(typ protowire.Type, data []byte) (string, int) {
	if typ != protowire.BytesType {
		return "", errCodeWireType
	}
	v, n := protowire.ConsumeBytes(data)
	if n < 0 {
		return "", n
	}
	return string(v), n
}

// consumeInt64 decodes an int64 (or enum) field's varint.
func consumeInt64(typ protowire.Type, data []byte) (int64, int) {
	if typ != protowire.VarintType {
		return 0, errCodeWireType
	}
	v, n := protowire.ConsumeVarint(data)
	return int64(v), n
}

// consumeInt32 decodes an enum field's varint, truncated as int32.
func consumeInt32(typ protowire.Type, data []byte) (int32, int) {
	v, n := consumeInt64(typ, data)
	return int32(v), n
}

// consumeUint32s decodes a repeated uint32 field's value: one varint, or
// a packed run of them; each goes to add.
func consumeUint32s(typ protowire.Type, data []byte, add func(uint32)) int {
	switch typ {
	case protowire.VarintType:
		v, n := protowire.ConsumeVarint(data)
		if n >= 0 {
			add(uint32(v))
		}
		return n
	case protowire.BytesType:
		b, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return n
		}
		for len(b) > 0 {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return m
			}
			add(uint32(v))
			b = b[m:]
		}
		return n
	}
	return errCodeWireType
}

// countField counts the values of field num at the top of a message, to
// size what collects them; on malformed data it stops where the decode
// will fail.
func countField(data []byte, num protowire.Number) int {
	count := 0
	for len(data) > 0 {
		k, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return count
		}
		m := protowire.ConsumeFieldValue(k, typ, data[n:])
		if m < 0 {
			return count
		}
		if k == num {
			count++
		}
		data = data[n+m:]
	}
	return count
}

// AppendReplicate appends the bytes of the peerlimit.v1.ReplicateRequest
// that ToProtoReplicate(origin, r) marshals to, exactly (the same fields,
// in the same order), without a message object for each state: a round
// sends thousands. SizeReplicate is their length.
func AppendReplicate(b []byte, origin string, r peer.Replication) []byte {
	b = appendString(b, 1, origin)
	for i := range r.States {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeKeyState(&r.States[i])))
		b = appendKeyState(b, &r.States[i])
	}
	if len(r.Whole) > 0 {
		n := 0
		for _, w := range r.Whole {
			n += protowire.SizeVarint(uint64(uint32(w)))
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		for _, w := range r.Whole {
			b = protowire.AppendVarint(b, uint64(uint32(w)))
		}
	}
	b = appendString(b, 4, r.Boot)
	return appendInt64(b, 5, SentToProto(r.Sent))
}

// SizeReplicate is the length of AppendReplicate's bytes.
func SizeReplicate(origin string, r peer.Replication) int {
	n := sizeString(1, origin) + sizeString(4, r.Boot) + sizeInt64(5, SentToProto(r.Sent))
	for i := range r.States {
		s := sizeKeyState(&r.States[i])
		n += 1 + protowire.SizeVarint(uint64(s)) + s
	}
	if len(r.Whole) > 0 {
		w := 0
		for _, p := range r.Whole {
			w += protowire.SizeVarint(uint64(uint32(p)))
		}
		n += 1 + protowire.SizeVarint(uint64(w)) + w
	}
	return n
}

// keyStateFieldsOf is a state's fields as ToProtoKeyState sets them.
func keyStateFieldsOf(ks *limiter.KeyState) (windowMS, base int64, unit int32, zone string) {
	c, z := CalendarToProto(ks.Calendar)
	if len(ks.Log) > 0 {
		base = ks.Log[0]
	}
	return ks.Window.Milliseconds(), base, int32(c), z
}

// logOffset is a log entry's offset from its first, as logOffsets has it.
func logOffset(t, first int64) uint64 { return uint64(uint32(min(t-first, math.MaxUint32))) }

func sizeKeyState(ks *limiter.KeyState) int {
	windowMS, base, unit, zone := keyStateFieldsOf(ks)
	n := sizeString(1, ks.Key) + sizeInt64(2, windowMS) + sizeInt64(3, int64(ks.Algorithm)) + sizeInt64(4, ks.WindowID) +
		sizeInt64(5, ks.Prev) + sizeInt64(6, ks.Curr) + sizeInt64(7, base) + sizeInt64(9, int64(unit)) +
		sizeString(10, zone) + sizeInt64(11, ks.TAT)
	if p := sizeLogOffsets(ks.Log); p > 0 {
		n += 1 + protowire.SizeVarint(uint64(p)) + p
	}
	if p := sizeTags(ks.Tags); p > 0 {
		n += 1 + protowire.SizeVarint(uint64(p)) + p
	}
	return n
}

func appendKeyState(b []byte, ks *limiter.KeyState) []byte {
	windowMS, base, unit, zone := keyStateFieldsOf(ks)
	b = appendString(b, 1, ks.Key)
	b = appendInt64(b, 2, windowMS)
	b = appendInt64(b, 3, int64(ks.Algorithm))
	b = appendInt64(b, 4, ks.WindowID)
	b = appendInt64(b, 5, ks.Prev)
	b = appendInt64(b, 6, ks.Curr)
	b = appendInt64(b, 7, base)
	if p := sizeLogOffsets(ks.Log); p > 0 {
		b = protowire.AppendTag(b, 8, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(p))
		for _, t := range ks.Log {
			b = protowire.AppendVarint(b, logOffset(t, ks.Log[0]))
		}
	}
	b = appendInt64(b, 9, int64(unit))
	b = appendString(b, 10, zone)
	b = appendInt64(b, 11, ks.TAT)
	if p := sizeTags(ks.Tags); p > 0 {
		b = protowire.AppendTag(b, 12, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(p))
		for _, t := range ks.Tags {
			b = protowire.AppendVarint(b, uint64(t))
		}
	}
	return b
}

func sizeLogOffsets(log []int64) int {
	n := 0
	for _, t := range log {
		n += protowire.SizeVarint(logOffset(t, log[0]))
	}
	return n
}

func sizeTags(tags []uint32) int {
	n := 0
	for _, t := range tags {
		n += protowire.SizeVarint(uint64(t))
	}
	return n
}

// appendString and appendInt64 write a proto3 field, omitted when zero.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendInt64(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(v))
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func sizeInt64(num protowire.Number, v int64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(uint64(v))
}
