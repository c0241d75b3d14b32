package jepsenlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// nfqueue is a minimal client of the kernel's netfilter queue
// (nfnetlink_queue), on a netlink socket opened with package syscall: the
// module proxy refuses github.com/florianl/go-nfqueue here (403), and the
// part of the protocol a delayer needs (bind a queue, read each packet's
// id and addresses, send a verdict) is small enough not to add a module
// for it (docs/design.md, "Libraries left out").
//
// Read is called by one goroutine; Verdict may be called concurrently with
// it (a netlink socket's send and receive are independent).
type nfqueue struct {
	f   *os.File // nonblocking: Read waits in Go's poller, and Close wakes it
	num uint16
	buf []byte
}

// Netlink and nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5
	nfqaCfgFGSO     = 1 << 2 // hand over GSO packets whole: the delayer reads headers only

	nfqnlCfgCmdBind   = 1
	nfqnlCopyPacket   = 2
	nfqaPacketHdr     = 1
	nfqaVerdictHdr    = 2
	nfqaPayload       = 10
	nfAccept          = 1
	nfDrop            = 0
	nlaTypeMask       = 0x3fff
	netlinkNetfilter  = 12
	nlmsgHdrLen       = 16
	nfgenHdrLen       = 4
	nfqCopyRange      = 20 // the IPv4 header: the delayer needs the addresses only
	nfqSocketRcvBytes = 4 << 20
)

// errQueueBusy: another process has bound the queue number.
var errQueueBusy = errors.New("netfilter queue number in use")

// openNFQueue binds queue num for IPv4, copying each packet's first 20
// bytes, and lets the kernel hold up to maxLen packets waiting for a
// verdict.
func openNFQueue(num uint16, maxLen uint32) (*nfqueue, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkNetfilter)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// Best effort: a larger buffer only makes ENOBUFS rarer.
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, nfqSocketRcvBytes)
	q := &nfqueue{num: num, buf: make([]byte, 1<<16)}
	cfg := func(attrs ...[]byte) error {
		if err := q.sendFd(fd, nfqnlMsgConfig, syscall.NLM_F_REQUEST|syscall.NLM_F_ACK, attrs...); err != nil {
			return err
		}
		return q.ackFd(fd)
	}
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, nfqCopyRange)
	params[4] = nfqnlCopyPacket
	maxl := binary.BigEndian.AppendUint32(nil, maxLen)
	gso := binary.BigEndian.AppendUint32(nil, nfqaCfgFGSO)
	steps := [][][]byte{
		{nlattr(nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, syscall.AF_INET})},
		{nlattr(nfqaCfgParams, params)},
		{nlattr(nfqaCfgQueueMax, maxl)},
		{nlattr(nfqaCfgFlags, gso), nlattr(nfqaCfgMask, gso)},
	}
	for i, attrs := range steps {
		if err := cfg(attrs...); err != nil {
			syscall.Close(fd)
			if i == 0 && errors.Is(err, syscall.EBUSY) {
				return nil, fmt.Errorf("bind queue %d: %w: %v", num, errQueueBusy, err)
			}
			return nil, fmt.Errorf("configure queue %d: %w", num, err)
		}
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	q.f = os.NewFile(uintptr(fd), fmt.Sprintf("nfqueue-%d", num))
	return q, nil
}

// nfPacket is a queued packet: its id for the verdict, and its addresses.
type nfPacket struct {
	id       uint32
	src, dst [4]byte
}

// Read waits for the next batch of packets (until deadline, if not zero)
// and appends them to out. A full socket buffer (ENOBUFS: the kernel
// dropped packets it could not hand over) is returned as an error the
// caller counts and goes on from.
func (q *nfqueue) Read(out []nfPacket, deadline time.Time) ([]nfPacket, error) {
	if err := q.f.SetReadDeadline(deadline); err != nil {
		return out, err
	}
	rc, err := q.f.SyscallConn()
	if err != nil {
		return out, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), q.buf, 0)
		return rerr != syscall.EAGAIN
	})
	if err != nil {
		return out, err
	}
	if rerr != nil {
		return out, rerr
	}
	return parsePackets(q.buf[:n], out)
}

// parsePackets decodes the queue's packet messages in b. An error the
// kernel sent back (a verdict for a packet it no longer holds) does not
// stop it: the packets after it are decoded, and the last such error is
// returned with them.
func parsePackets(b []byte, out []nfPacket) ([]nfPacket, error) {
	var kerr error
	for len(b) >= nlmsgHdrLen {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if l < nlmsgHdrLen || l > len(b) {
			return out, errors.Join(kerr, fmt.Errorf("netlink message of %d bytes in %d", l, len(b)))
		}
		msg := b[nlmsgHdrLen:l]
		b = b[min(nlAlign(l), len(b)):]
		switch {
		case typ == syscall.NLMSG_ERROR:
			if len(msg) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(msg)); e != 0 {
					kerr = fmt.Errorf("netlink: %w", syscall.Errno(-e))
				}
			}
			continue
		case typ != nfnlSubsysQueue<<8|nfqnlMsgPacket || len(msg) < nfgenHdrLen:
			continue
		}
		var p nfPacket
		var haveID, haveAddr bool
		for a := msg[nfgenHdrLen:]; len(a) >= 4; {
			al := int(binary.NativeEndian.Uint16(a[0:2]))
			at := binary.NativeEndian.Uint16(a[2:4]) & nlaTypeMask
			if al < 4 || al > len(a) {
				break
			}
			v := a[4:al]
			switch {
			case at == nfqaPacketHdr && len(v) >= 4:
				p.id, haveID = binary.BigEndian.Uint32(v), true
			case at == nfqaPayload && len(v) >= 20 && v[0]>>4 == 4:
				copy(p.src[:], v[12:16])
				copy(p.dst[:], v[16:20])
				haveAddr = true
			}
			a = a[min(nlAlign(al), len(a)):]
		}
		if haveID {
			if !haveAddr { // not IPv4: released at once (no link has it)
				p.src, p.dst = [4]byte{}, [4]byte{}
			}
			out = append(out, p)
		}
	}
	return out, kerr
}

// Verdict accepts or drops packet id.
func (q *nfqueue) Verdict(id uint32, accept bool) error {
	v := make([]byte, 8)
	if accept {
		binary.BigEndian.PutUint32(v, nfAccept)
	} else {
		binary.BigEndian.PutUint32(v, nfDrop)
	}
	binary.BigEndian.PutUint32(v[4:], id)
	rc, err := q.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = q.sendFd(int(fd), nfqnlMsgVerdict, syscall.NLM_F_REQUEST, nlattr(nfqaVerdictHdr, v))
		return serr != syscall.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

// Close unbinds the queue: the kernel drops what still waits for a
// verdict, so the delayer releases what it holds first.
func (q *nfqueue) Close() error { return q.f.Close() }

func (q *nfqueue) sendFd(fd int, msgType uint16, flags uint16, attrs ...[]byte) error {
	size := nlmsgHdrLen + nfgenHdrLen
	for _, a := range attrs {
		size += len(a)
	}
	m := make([]byte, nlmsgHdrLen, size)
	binary.NativeEndian.PutUint32(m[0:4], uint32(size))
	binary.NativeEndian.PutUint16(m[4:6], nfnlSubsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(m[6:8], flags)
	// nfgenmsg: family, version 0, the queue number (big-endian).
	m = append(m, syscall.AF_UNSPEC, 0, byte(q.num>>8), byte(q.num))
	for _, a := range attrs {
		m = append(m, a...)
	}
	return syscall.Sendto(fd, m, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
}

// ackFd reads the kernel's answer to a request sent with NLM_F_ACK.
func (q *nfqueue) ackFd(fd int) error {
	// The socket is still blocking here; a timeout keeps a silent kernel
	// from hanging the harness.
	tv := syscall.NsecToTimeval(int64(2 * time.Second))
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	n, _, err := syscall.Recvfrom(fd, q.buf, 0)
	if err != nil {
		return fmt.Errorf("netlink ack: %w", err)
	}
	_, err = parsePackets(q.buf[:n], nil)
	return err
}

// nlattr encodes one netlink attribute, padded to 4 bytes.
func nlattr(typ uint16, v []byte) []byte {
	l := 4 + len(v)
	a := make([]byte, nlAlign(l))
	binary.NativeEndian.PutUint16(a[0:2], uint16(l))
	binary.NativeEndian.PutUint16(a[2:4], typ)
	copy(a[4:], v)
	return a
}

func nlAlign(n int) int { return (n + 3) &^ 3 }
