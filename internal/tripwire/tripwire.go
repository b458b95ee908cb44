// Package tripwire fills every field of a message and names the fields two
// messages differ in, for the tests of hand-written codecs: a codec that
// round-trips a message with every field set knows every field, and one
// that does not is named by the field it dropped. Protobuf messages are
// filled from their descriptor (protoreflect), other structs (kmsg's
// requests) by Go reflection, so a field added to the schema is filled
// without the test being changed.
package tripwire

import (
	"fmt"
	"reflect"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxDepth bounds the recursion into message fields (a recursive message
// would otherwise never end).
const maxDepth = 8

// filler hands out distinct non-zero values, so a codec that swaps two
// fields is caught as well as one that drops a field.
type filler struct {
	next int64
	// oneof is the variant: each oneof sets its case number oneof modulo
	// its number of cases.
	oneof int
	// leaf counts the leaf fields (scalars, elements of repeated scalars,
	// map entries) met so far; when only is not negative, only the leaf
	// numbered only is set, with the messages that lead to it, and path
	// names it.
	leaf, only int
	path       string
}

func (f *filler) value() int64 {
	f.next++
	return f.next
}

// Fill sets every field of m, recursively: scalars to distinct non-zero
// values, repeated fields and maps to two elements, optional fields set.
// Of a oneof, it sets the case numbered variant modulo the oneof's number of
// cases; Variants says how many variants reach every case.
func Fill(m proto.Message, variant int) {
	f := &filler{oneof: variant, only: -1}
	f.message(m.ProtoReflect(), "", 0)
}

// Leaf sets, of the fields Fill(m, variant) sets, only leaf number n (a
// scalar, an element of a repeated scalar or a map entry, counted depth
// first) and the messages that hold it, to the value Fill gives it. It
// returns the leaf's path (records.offset.topic), or false when there are
// not n+1 leaves.
func Leaf(m proto.Message, variant, n int) (path string, ok bool) {
	f := &filler{oneof: variant, only: n}
	f.message(m.ProtoReflect(), "", 0)
	return f.path, f.path != ""
}

// take reports whether the next leaf, at path, is to be set.
func (f *filler) take(path string) bool {
	n := f.leaf
	f.leaf++
	if f.only < 0 {
		return true
	}
	if n == f.only {
		f.path = path
		return true
	}
	return false
}

// Variants is how many variants of Fill set every case of every oneof of
// d's messages: the largest number of cases of any oneof reached from d.
func Variants(d protoreflect.MessageDescriptor) int {
	return variants(d, 0)
}

func variants(d protoreflect.MessageDescriptor, depth int) int {
	n := 1
	if depth > maxDepth {
		return n
	}
	oneofs := d.Oneofs()
	for i := range oneofs.Len() {
		if o := oneofs.Get(i); !o.IsSynthetic() {
			n = max(n, o.Fields().Len())
		}
	}
	fields := d.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() != nil {
			n = max(n, variants(fd.Message(), depth+1))
		}
	}
	return n
}

// message fills m and reports whether it set anything in it (always, when
// every leaf is set).
func (f *filler) message(m protoreflect.Message, path string, depth int) bool {
	set := f.only < 0
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() && o.Fields().Get(f.oneof%o.Fields().Len()) != fd {
			continue
		}
		if fd.Message() != nil && !fd.IsMap() && depth >= maxDepth {
			continue
		}
		p := join(path, string(fd.Name()))
		switch {
		case fd.IsList():
			l := m.NewField(fd).List()
			for range 2 {
				if fd.Message() != nil {
					if e := l.NewElement(); f.message(e.Message(), p, depth+1) {
						l.Append(e)
					}
				} else if v := f.scalar(fd); f.take(p) {
					l.Append(v)
				}
			}
			if l.Len() > 0 {
				m.Set(fd, protoreflect.ValueOfList(l))
				set = true
			}
		case fd.IsMap():
			mp := m.NewField(fd).Map()
			for range 2 {
				k := f.scalar(fd.MapKey()).MapKey()
				if fd.MapValue().Message() != nil {
					if v := mp.NewValue(); f.message(v.Message(), p, depth+1) {
						mp.Set(k, v)
					}
				} else if v := f.scalar(fd.MapValue()); f.take(p) {
					mp.Set(k, v)
				}
			}
			if mp.Len() > 0 {
				m.Set(fd, protoreflect.ValueOfMap(mp))
				set = true
			}
		case fd.Message() != nil:
			if sub := m.NewField(fd); f.message(sub.Message(), p, depth+1) {
				m.Set(fd, sub)
				set = true
			}
		default:
			if v := f.scalar(fd); f.take(p) {
				m.Set(fd, v)
				set = true
			}
		}
	}
	return set
}

func (f *filler) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	v := f.value()
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		// A declared value other than zero, when there is one.
		var nonzero []protoreflect.EnumNumber
		values := fd.Enum().Values()
		for i := range values.Len() {
			if n := values.Get(i).Number(); n != 0 {
				nonzero = append(nonzero, n)
			}
		}
		if len(nonzero) == 0 {
			return protoreflect.ValueOfEnum(0)
		}
		return protoreflect.ValueOfEnum(nonzero[int(v)%len(nonzero)])
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(v))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(v)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(v))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(v))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(v))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s" + strconv.FormatInt(v, 10))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("b" + strconv.FormatInt(v, 10)))
	}
	panic(fmt.Sprintf("tripwire: field %s of kind %v", fd.FullName(), fd.Kind()))
}

// Diff names the fields in which got differs from want, as paths from the
// message (records[0].offset.topic); none when proto.Equal holds.
func Diff(want, got proto.Message) []string {
	if proto.Equal(want, got) {
		return nil
	}
	return diffMessage("", want.ProtoReflect(), got.ProtoReflect())
}

func diffMessage(path string, want, got protoreflect.Message) []string {
	if want.Descriptor().FullName() != got.Descriptor().FullName() {
		return []string{fmt.Sprintf("%s: %s, want %s", pathOr(path), got.Descriptor().FullName(), want.Descriptor().FullName())}
	}
	var out []string
	fields := want.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		p := join(path, string(fd.Name()))
		switch {
		case want.Has(fd) != got.Has(fd):
			out = append(out, fmt.Sprintf("%s: set %v, want set %v (field %d of %s)", p, got.Has(fd), want.Has(fd), fd.Number(), fd.ContainingMessage().FullName()))
		case !want.Has(fd):
		case fd.IsList():
			wl, gl := want.Get(fd).List(), got.Get(fd).List()
			if wl.Len() != gl.Len() {
				out = append(out, fmt.Sprintf("%s: %d elements, want %d", p, gl.Len(), wl.Len()))
				continue
			}
			for j := range wl.Len() {
				out = append(out, diffValue(fd, fmt.Sprintf("%s[%d]", p, j), wl.Get(j), gl.Get(j))...)
			}
		case fd.IsMap():
			if !want.Get(fd).Equal(got.Get(fd)) {
				out = append(out, p+": map differs")
			}
		default:
			out = append(out, diffValue(fd, p, want.Get(fd), got.Get(fd))...)
		}
	}
	if !bytesEqual(want.GetUnknown(), got.GetUnknown()) {
		out = append(out, join(path, "(unknown fields)")+" differ")
	}
	return out
}

func diffValue(fd protoreflect.FieldDescriptor, path string, want, got protoreflect.Value) []string {
	if fd.Message() != nil {
		return diffMessage(path, want.Message(), got.Message())
	}
	if !want.Equal(got) {
		return []string{fmt.Sprintf("%s: %v, want %v (field %d of %s)", path, got, want, fd.Number(), fd.ContainingMessage().FullName())}
	}
	return nil
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func pathOr(path string) string {
	if path == "" {
		return "(message)"
	}
	return path
}

// FillStruct sets every exported field of the struct *p, recursively:
// numbers to distinct non-zero values, bools true, strings and pointers
// set, slices to elems elements. Fields named in skip (by Go name, at any
// depth) are left alone.
func FillStruct(p any, elems int, skip ...string) {
	f := &filler{}
	f.structValue(reflect.ValueOf(p).Elem(), elems, skip, 0)
}

func (f *filler) structValue(v reflect.Value, elems int, skip []string, depth int) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() || contains(skip, sf.Name) {
			continue
		}
		f.goValue(v.Field(i), elems, skip, depth)
	}
}

func (f *filler) goValue(v reflect.Value, elems int, skip []string, depth int) {
	if depth > maxDepth {
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(f.value() % 127)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.value() % 127))
	case reflect.String:
		v.SetString("s" + strconv.FormatInt(f.value(), 10))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.goValue(p.Elem(), elems, skip, depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), elems, elems)
		for j := range elems {
			f.goValue(s.Index(j), elems, skip, depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for j := range v.Len() {
			f.goValue(v.Index(j), elems, skip, depth+1)
		}
	case reflect.Struct:
		f.structValue(v, elems, skip, depth+1)
	default:
		panic(fmt.Sprintf("tripwire: a field of kind %v", v.Kind()))
	}
}

// DiffStruct names the exported fields in which the structs *got and
// *want differ, as paths (Topics[0].Partitions[0].Metadata); none when
// they are equal.
func DiffStruct(want, got any) []string {
	return diffGo("", reflect.ValueOf(want).Elem(), reflect.ValueOf(got).Elem())
}

func diffGo(path string, want, got reflect.Value) []string {
	switch want.Kind() {
	case reflect.Struct:
		var out []string
		for i := range want.NumField() {
			if sf := want.Type().Field(i); sf.IsExported() {
				out = append(out, diffGo(join(path, sf.Name), want.Field(i), got.Field(i))...)
			}
		}
		return out
	case reflect.Pointer:
		if want.IsNil() || got.IsNil() {
			if want.IsNil() != got.IsNil() {
				return []string{fmt.Sprintf("%s: nil %v, want nil %v", pathOr(path), got.IsNil(), want.IsNil())}
			}
			return nil
		}
		return diffGo(path, want.Elem(), got.Elem())
	case reflect.Slice, reflect.Array:
		if want.Len() != got.Len() {
			return []string{fmt.Sprintf("%s: %d elements, want %d", pathOr(path), got.Len(), want.Len())}
		}
		var out []string
		for j := range want.Len() {
			out = append(out, diffGo(fmt.Sprintf("%s[%d]", path, j), want.Index(j), got.Index(j))...)
		}
		return out
	}
	if !want.Equal(got) {
		return []string{fmt.Sprintf("%s: %v, want %v", pathOr(path), got, want)}
	}
	return nil
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
