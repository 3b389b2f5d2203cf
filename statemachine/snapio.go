package statemachine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// Snapshot stream: magic, then (uvarint klen > 0, key, uvarint vlen, value)*,
// then a single 0 byte.
type snapWriter struct {
	w   *bufio.Writer
	err error
	tmp [binary.MaxVarintLen64]byte
}

func newSnapWriter(w io.Writer) *snapWriter { return &snapWriter{w: bufio.NewWriterSize(w, 1<<20)} }

func (s *snapWriter) raw(b []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(b)
	}
}

func (s *snapWriter) uvarint(v uint64) {
	n := binary.PutUvarint(s.tmp[:], v)
	s.raw(s.tmp[:n])
}

func (s *snapWriter) pair(k, v []byte) {
	s.uvarint(uint64(len(k)))
	s.raw(k)
	s.uvarint(uint64(len(v)))
	s.raw(v)
}

func (s *snapWriter) end() {
	s.raw([]byte{0})
	if s.err == nil {
		s.err = s.w.Flush()
	}
}

type snapReader struct {
	r   *bufio.Reader
	err error
}

func newSnapReader(r io.Reader) *snapReader { return &snapReader{r: bufio.NewReaderSize(r, 1<<20)} }

func (s *snapReader) raw(n int) []byte {
	if s.err != nil {
		return nil
	}
	b := make([]byte, n)
	_, s.err = io.ReadFull(s.r, b)
	return b
}

const maxSnapValue = 512 << 20

func (s *snapReader) pair() (k, v []byte, ok bool) {
	kl, err := binary.ReadUvarint(s.r)
	if err != nil {
		s.err = err
		return nil, nil, false
	}
	if kl == 0 {
		return nil, nil, false
	}
	if kl > 1<<20 {
		s.err = errors.New("statemachine: snapshot key too long")
		return nil, nil, false
	}
	k = s.raw(int(kl))
	vl, err := binary.ReadUvarint(s.r)
	if err != nil {
		s.err = err
		return nil, nil, false
	}
	if vl > maxSnapValue {
		s.err = errors.New("statemachine: snapshot value too long")
		return nil, nil, false
	}
	v = s.raw(int(vl))
	return k, v, s.err == nil
}
