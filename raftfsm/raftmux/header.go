package raftmux

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderLen is the length of the header a connection starts with.
const HeaderLen = 5

// Version is the header version this package writes and accepts.
const Version = 1

var magic = [2]byte{'c', 'R'}

// Sentinel errors of DecodeHeader.
var (
	ErrShortHeader = errors.New("raftmux: short header")
	ErrBadMagic    = errors.New("raftmux: not a raftmux header")
	ErrBadVersion  = errors.New("raftmux: unsupported header version")
)

// AppendHeader appends the header naming shard to b.
func AppendHeader(b []byte, shard uint16) []byte {
	b = append(b, magic[0], magic[1], Version)
	return binary.BigEndian.AppendUint16(b, shard)
}

// DecodeHeader returns the shard named by the header at the start of b.
func DecodeHeader(b []byte) (uint16, error) {
	if len(b) < HeaderLen {
		return 0, ErrShortHeader
	}
	if b[0] != magic[0] || b[1] != magic[1] {
		return 0, fmt.Errorf("%w: % x", ErrBadMagic, b[:2])
	}
	if b[2] != Version {
		return 0, fmt.Errorf("%w: %d", ErrBadVersion, b[2])
	}
	return binary.BigEndian.Uint16(b[3:HeaderLen]), nil
}
