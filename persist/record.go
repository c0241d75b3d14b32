package persist

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A file of the log is a sequence of records, each
//
//	length  uint32, little-endian: of kind and body
//	crc     uint32, little-endian: CRC-32C of kind and body
//	kind    one byte (kindOwn, kindReplica, kindDrop, kindEnd)
//	body    a protobuf message (ReplicateRequest; see Log)
//
// A reader stops at the first record that is short, longer than
// maxRecord, or whose checksum does not match: what follows in that file
// is dropped, never guessed at.

// The kinds of record.
const (
	kindOwn     byte = 'O' // states of the node's own store, as they are now (ReplicateRequest.states)
	kindReplica byte = 'R' // a replication another member made here (ReplicateRequest, rebased onto this node's clock on arrival; sent_unix_ms 0)
	kindDrop    byte = 'D' // replica partitions dropped (ReplicateRequest.whole)
	kindEnd     byte = 'E' // the end of a snapshot: it is whole
)

const (
	headerLen = 8
	// maxRecord bounds a record: a length past it is corruption. A
	// record is a round's changes, or a chunk of a snapshot.
	maxRecord = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends the framed record of kind and body to buf.
func appendRecord(buf []byte, kind byte, body []byte) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(1+len(body)))
	crc := crc32.Update(crc32.Update(0, crcTable, []byte{kind}), crcTable, body)
	binary.LittleEndian.PutUint32(h[4:], crc)
	buf = append(buf, h[:]...)
	buf = append(buf, kind)
	return append(buf, body...)
}

// errBadRecord is why a reader stopped before the end of a file.
var errBadRecord = errors.New("bad record")

// reader reads a file's records in order.
type reader struct {
	r    *bufio.Reader
	off  int64 // of the next record
	body []byte
}

func newReader(r io.Reader) *reader { return &reader{r: bufio.NewReaderSize(r, 1<<20)} }

// next returns the next record's kind and body (valid until the next
// call), io.EOF at a clean end, or an error wrapping errBadRecord that
// says what is wrong at which offset.
func (rd *reader) next() (byte, []byte, error) {
	var h [headerLen]byte
	n, err := io.ReadFull(rd.r, h[:])
	switch {
	case err == io.EOF:
		return 0, nil, io.EOF
	case err != nil:
		return 0, nil, fmt.Errorf("%w at offset %d: a header cut short after %d bytes", errBadRecord, rd.off, n)
	}
	length := binary.LittleEndian.Uint32(h[0:])
	if length < 1 || length > maxRecord {
		return 0, nil, fmt.Errorf("%w at offset %d: length %d", errBadRecord, rd.off, length)
	}
	if cap(rd.body) < int(length) {
		rd.body = make([]byte, length)
	}
	rd.body = rd.body[:length]
	if n, err := io.ReadFull(rd.r, rd.body); err != nil {
		return 0, nil, fmt.Errorf("%w at offset %d: %d of %d bytes, cut short", errBadRecord, rd.off, n, length)
	}
	if crc32.Checksum(rd.body, crcTable) != binary.LittleEndian.Uint32(h[4:]) {
		return 0, nil, fmt.Errorf("%w at offset %d: checksum mismatch", errBadRecord, rd.off)
	}
	rd.off += headerLen + int64(length)
	return rd.body[0], rd.body[1:], nil
}
