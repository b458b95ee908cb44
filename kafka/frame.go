package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// readBody reads n bytes; big frames grow with the data that actually arrives
// rather than being allocated up front from a claimed size.
func readBody(r io.Reader, n int) ([]byte, error) {
	if n <= 1<<20 {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf.Bytes(), nil
}

// header is the decoded request header.
type header struct {
	key, version int16
	corr         int32
	clientID     []byte // nil: null
}

// tagReader reads the tagged-field section of a flexible request header.
type tagReader struct {
	src []byte
	bad bool
}

func (r *tagReader) Ok() bool { return !r.bad }

func (r *tagReader) Uvarint() uint32 {
	v, n := binary.Uvarint(r.src)
	if n <= 0 || v > 1<<31 {
		r.bad = true
		r.src = nil
		return 0
	}
	r.src = r.src[n:]
	return uint32(v)
}

func (r *tagReader) Span(n int) []byte {
	if n < 0 || n > len(r.src) {
		r.bad = true
		r.src = nil
		return nil
	}
	s := r.src[:n]
	r.src = r.src[n:]
	return s
}

func parseHeader(b []byte) (header, []byte, error) {
	if len(b) < 10 {
		return header{}, nil, fmt.Errorf("%w: short request header", errBadInput)
	}
	h := header{
		key:     int16(binary.BigEndian.Uint16(b[0:])),
		version: int16(binary.BigEndian.Uint16(b[2:])),
		corr:    int32(binary.BigEndian.Uint32(b[4:])),
	}
	idLen := int16(binary.BigEndian.Uint16(b[8:]))
	b = b[10:]
	if idLen > 0 {
		if int(idLen) > len(b) {
			return header{}, nil, fmt.Errorf("%w: client id overflows the frame", errBadInput)
		}
		h.clientID = b[:idLen:idLen]
		b = b[idLen:]
	} else if idLen < -1 {
		return header{}, nil, fmt.Errorf("%w: client id length %d", errBadInput, idLen)
	}
	return h, b, nil
}
