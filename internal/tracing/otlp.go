package tracing

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// This file writes an OTLP ExportTraceServiceRequest in the protobuf wire
// format by hand, with protowire only: the generated OTLP types
// (go.opentelemetry.io/proto/otlp) and gRPC, which the SDK's own exporter
// links, cost the worker megabytes of resident memory at start-up for a
// few dozen fields. The field numbers are those of opentelemetry-proto
// v1.x: collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
// common/v1/common.proto and resource/v1/resource.proto. Scalars at their
// zero value are left out, as a proto3 encoder does, except inside
// AnyValue's oneof, where the field's presence is the value's type.

// ExportTraceServiceRequest.
const fieldRequestResourceSpans protowire.Number = 1

// ResourceSpans.
const (
	fieldResourceSpansResource   protowire.Number = 1
	fieldResourceSpansScopeSpans protowire.Number = 2
	fieldResourceSpansSchemaURL  protowire.Number = 3
)

// Resource.
const fieldResourceAttributes protowire.Number = 1

// ScopeSpans.
const (
	fieldScopeSpansScope     protowire.Number = 1
	fieldScopeSpansSpans     protowire.Number = 2
	fieldScopeSpansSchemaURL protowire.Number = 3
)

// InstrumentationScope.
const (
	fieldScopeName       protowire.Number = 1
	fieldScopeVersion    protowire.Number = 2
	fieldScopeAttributes protowire.Number = 3
)

// Span.
const (
	fieldSpanTraceID                protowire.Number = 1
	fieldSpanSpanID                 protowire.Number = 2
	fieldSpanTraceState             protowire.Number = 3
	fieldSpanParentSpanID           protowire.Number = 4
	fieldSpanName                   protowire.Number = 5
	fieldSpanKind                   protowire.Number = 6  // varint (enum)
	fieldSpanStartTime              protowire.Number = 7  // fixed64
	fieldSpanEndTime                protowire.Number = 8  // fixed64
	fieldSpanAttributes             protowire.Number = 9  // KeyValue
	fieldSpanDroppedAttributesCount protowire.Number = 10 // varint
	fieldSpanEvents                 protowire.Number = 11
	fieldSpanDroppedEventsCount     protowire.Number = 12
	fieldSpanLinks                  protowire.Number = 13
	fieldSpanDroppedLinksCount      protowire.Number = 14
	fieldSpanStatus                 protowire.Number = 15
	fieldSpanFlags                  protowire.Number = 16 // fixed32
)

// Span.Event.
const (
	fieldEventTime                   protowire.Number = 1 // fixed64
	fieldEventName                   protowire.Number = 2
	fieldEventAttributes             protowire.Number = 3
	fieldEventDroppedAttributesCount protowire.Number = 4
)

// Span.Link.
const (
	fieldLinkTraceID                protowire.Number = 1
	fieldLinkSpanID                 protowire.Number = 2
	fieldLinkTraceState             protowire.Number = 3
	fieldLinkAttributes             protowire.Number = 4
	fieldLinkDroppedAttributesCount protowire.Number = 5
	fieldLinkFlags                  protowire.Number = 6 // fixed32
)

// Status.
const (
	fieldStatusMessage protowire.Number = 2
	fieldStatusCode    protowire.Number = 3
)

// KeyValue, AnyValue (a oneof), ArrayValue and KeyValueList.
const (
	fieldKeyValueKey   protowire.Number = 1
	fieldKeyValueValue protowire.Number = 2

	fieldAnyString = 1
	fieldAnyBool   = 2 // varint
	fieldAnyInt    = 3 // varint
	fieldAnyDouble = 4 // fixed64
	fieldAnyArray  = 5 // ArrayValue
	fieldAnyKvlist = 6 // KeyValueList
	fieldAnyBytes  = 7

	fieldArrayValues  protowire.Number = 1
	fieldKvlistValues protowire.Number = 1
)

// ExportTraceServiceResponse and its ExportTracePartialSuccess.
const (
	fieldResponsePartialSuccess protowire.Number = 1
	fieldPartialRejectedSpans   protowire.Number = 1
	fieldPartialErrorMessage    protowire.Number = 2
)

// Span.SpanKind and Status.StatusCode.
const (
	kindUnspecified = 0
	kindInternal    = 1
	kindServer      = 2
	kindClient      = 3
	kindProducer    = 4
	kindConsumer    = 5

	statusUnset = 0
	statusOK    = 1
	statusError = 2
)

// SpanFlags: the low 8 bits are the W3C trace flags; these two say
// whether the parent (of a span) or the linked span context (of a link)
// is remote.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// appendRequest appends spans as an ExportTraceServiceRequest: one
// ResourceSpans per distinct resource and, in it, one ScopeSpans per
// instrumentation scope, in the order they first appear in spans.
func appendRequest(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	type scopeGroup struct {
		scope instrumentation.Scope
		spans []sdktrace.ReadOnlySpan
	}
	type resourceGroup struct {
		res    *resource.Resource
		scopes []*scopeGroup
	}
	var resources []*resourceGroup
	byResource := map[attribute.Distinct]*resourceGroup{}
	byScope := map[scopeKey]*scopeGroup{}
	for _, s := range spans {
		if s == nil {
			continue
		}
		rk := s.Resource().Equivalent()
		rg := byResource[rk]
		if rg == nil {
			rg = &resourceGroup{res: s.Resource()}
			byResource[rk] = rg
			resources = append(resources, rg)
		}
		sk := scopeKey{rk, s.InstrumentationScope()}
		sg := byScope[sk]
		if sg == nil {
			sg = &scopeGroup{scope: sk.scope}
			byScope[sk] = sg
			rg.scopes = append(rg.scopes, sg)
		}
		sg.spans = append(sg.spans, s)
	}

	for _, rg := range resources {
		b = appendMessage(b, fieldRequestResourceSpans, func(b []byte) []byte {
			if rg.res != nil {
				b = appendMessage(b, fieldResourceSpansResource, func(b []byte) []byte {
					for iter := rg.res.Iter(); iter.Next(); {
						b = appendKeyValue(b, fieldResourceAttributes, iter.Attribute())
					}
					return b
				})
			}
			for _, sg := range rg.scopes {
				b = appendMessage(b, fieldResourceSpansScopeSpans, func(b []byte) []byte {
					return appendScopeSpans(b, sg.scope, sg.spans)
				})
			}
			return appendString(b, fieldResourceSpansSchemaURL, rg.res.SchemaURL())
		})
	}
	return b
}

// appendScopeSpans appends the fields of a ScopeSpans.
func appendScopeSpans(b []byte, scope instrumentation.Scope, spans []sdktrace.ReadOnlySpan) []byte {
	if scope != (instrumentation.Scope{}) {
		b = appendMessage(b, fieldScopeSpansScope, func(b []byte) []byte {
			b = appendString(b, fieldScopeName, scope.Name)
			b = appendString(b, fieldScopeVersion, scope.Version)
			for iter := scope.Attributes.Iter(); iter.Next(); {
				b = appendKeyValue(b, fieldScopeAttributes, iter.Attribute())
			}
			return b
		})
	}
	for _, s := range spans {
		b = appendMessage(b, fieldScopeSpansSpans, func(b []byte) []byte { return appendSpan(b, s) })
	}
	return appendString(b, fieldScopeSpansSchemaURL, scope.SchemaURL)
}

// appendSpan appends the fields of a Span.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fieldSpanTraceID, tid[:])
	b = appendBytes(b, fieldSpanSpanID, sid[:])
	b = appendString(b, fieldSpanTraceState, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, fieldSpanParentSpanID, psid[:])
	}
	b = appendString(b, fieldSpanName, s.Name())
	b = appendVarint(b, fieldSpanKind, spanKind(s.SpanKind()))
	b = appendFixed64(b, fieldSpanStartTime, unixNano(s.StartTime().UnixNano()))
	b = appendFixed64(b, fieldSpanEndTime, unixNano(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, fieldSpanAttributes, kv)
	}
	b = appendVarint(b, fieldSpanDroppedAttributesCount, count(s.DroppedAttributes()))
	for _, e := range s.Events() {
		b = appendMessage(b, fieldSpanEvents, func(b []byte) []byte {
			b = appendFixed64(b, fieldEventTime, unixNano(e.Time.UnixNano()))
			b = appendString(b, fieldEventName, e.Name)
			for _, kv := range e.Attributes {
				b = appendKeyValue(b, fieldEventAttributes, kv)
			}
			return appendVarint(b, fieldEventDroppedAttributesCount, count(e.DroppedAttributeCount))
		})
	}
	b = appendVarint(b, fieldSpanDroppedEventsCount, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		b = appendMessage(b, fieldSpanLinks, func(b []byte) []byte {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, fieldLinkTraceID, ltid[:])
			b = appendBytes(b, fieldLinkSpanID, lsid[:])
			b = appendString(b, fieldLinkTraceState, l.SpanContext.TraceState().String())
			for _, kv := range l.Attributes {
				b = appendKeyValue(b, fieldLinkAttributes, kv)
			}
			b = appendVarint(b, fieldLinkDroppedAttributesCount, count(l.DroppedAttributeCount))
			return appendFixed32(b, fieldLinkFlags, flags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote()))
		})
	}
	b = appendVarint(b, fieldSpanDroppedLinksCount, count(s.DroppedLinks()))
	// Always present, as the SDK's exporter sends it: an empty Status is
	// UNSET.
	st := s.Status()
	b = appendMessage(b, fieldSpanStatus, func(b []byte) []byte {
		b = appendString(b, fieldStatusMessage, st.Description)
		return appendVarint(b, fieldStatusCode, statusCode(st.Code))
	})
	return appendFixed32(b, fieldSpanFlags, flags(sc.TraceFlags(), parent.IsRemote()))
}

// appendKeyValue appends kv as a KeyValue in field num.
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		b = appendString(b, fieldKeyValueKey, string(kv.Key))
		return appendMessage(b, fieldKeyValueValue, func(b []byte) []byte { return appendAnyValue(b, kv.Value) })
	})
}

// appendAnyValue appends the fields of v as an AnyValue: a slice of any
// kind is an ArrayValue, a map a KeyValueList, an empty value no field at
// all. A type this encoder does not know is the string "INVALID", as the
// SDK's exporter has it.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.EMPTY:
		return b
	case attribute.BOOL:
		return protowire.AppendVarint(protowire.AppendTag(b, fieldAnyBool, protowire.VarintType), protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, fieldAnyInt, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, fieldAnyDouble, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		return protowire.AppendString(protowire.AppendTag(b, fieldAnyString, protowire.BytesType), v.AsString())
	case attribute.BYTESLICE:
		return protowire.AppendBytes(protowire.AppendTag(b, fieldAnyBytes, protowire.BytesType), v.AsByteSlice())
	case attribute.BOOLSLICE:
		return appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		return appendArray(b, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		return appendMessage(b, fieldAnyKvlist, func(b []byte) []byte {
			for _, kv := range v.AsMap() {
				b = appendKeyValue(b, fieldKvlistValues, kv)
			}
			return b
		})
	default:
		return protowire.AppendString(protowire.AppendTag(b, fieldAnyString, protowire.BytesType), "INVALID")
	}
}

// appendArray appends vs as AnyValue's ArrayValue, each element made a
// Value by value.
func appendArray[T any](b []byte, vs []T, value func(T) attribute.Value) []byte {
	return appendMessage(b, fieldAnyArray, func(b []byte) []byte {
		for _, v := range vs {
			b = appendMessage(b, fieldArrayValues, func(b []byte) []byte { return appendAnyValue(b, value(v)) })
		}
		return b
	})
}

// appendMessage appends field num holding the message body appends. The
// length goes before the body, and is known only after it: a byte is set
// aside for it (most of the messages here are shorter than 128 bytes),
// and the body moved along when the length takes more.
func appendMessage(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = append(b, 0)
	b = body(b)
	n := len(b) - at - 1
	size := protowire.SizeVarint(uint64(n))
	if size > 1 {
		b = append(b, make([]byte, size-1)...)
		copy(b[at+size:], b[at+1:at+1+n])
	}
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

// appendString appends field num unless s is empty.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

// appendBytes appends field num unless p is empty.
func appendBytes(b []byte, num protowire.Number, p []byte) []byte {
	if len(p) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), p)
}

// appendVarint appends field num unless v is 0.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// appendFixed64 appends field num unless v is 0.
func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

// appendFixed32 appends field num unless v is 0.
func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
}

func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return kindInternal
	case trace.SpanKindServer:
		return kindServer
	case trace.SpanKindClient:
		return kindClient
	case trace.SpanKindProducer:
		return kindProducer
	case trace.SpanKindConsumer:
		return kindConsumer
	default:
		return kindUnspecified
	}
}

func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return statusOK
	case codes.Error:
		return statusError
	default:
		return statusUnset
	}
}

// flags is a span's or link's SpanFlags: the trace flags, and whether
// the parent or linked span context is remote.
func flags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if remote {
		f |= flagIsRemote
	}
	return f
}

// unixNano is a time's Unix nanoseconds, 0 before 1970.
func unixNano(ns int64) uint64 { return uint64(max(ns, 0)) }

// count is a dropped count, clamped to uint32.
func count(n int) uint64 { return uint64(min(max(n, 0), math.MaxUint32)) }

// partialSuccess reads an ExportTraceServiceResponse: how many spans the
// collector rejected, and why. A malformed response is an error.
func partialSuccess(b []byte) (rejected int64, message string, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != fieldResponsePartialSuccess || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
			switch {
			case num == fieldPartialRejectedSpans && typ == protowire.VarintType:
				rejected = int64(x)
			case num == fieldPartialErrorMessage && typ == protowire.BytesType:
				message = string(v)
			}
			return nil
		})
	})
	return rejected, message, err
}

// eachField calls fn with each field of the message b: a length-delimited
// field's bytes as v, a varint's or fixed number's value as x.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
