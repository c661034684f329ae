package main

// The project's echo service (xds-test-server/src/echo.rs) without protoc: the
// two messages are encoded by hand with protowire, and echoCodec hands every
// other message (ORCA, health) to gRPC's own proto codec.

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

const echoMethod = "/xds.test.Echo/Echo"

// echoRequest is xds.test.EchoRequest: message = 1 (string), delay_ms = 2 (uint32).
type echoRequest struct {
	message string
	delayMs uint32
}

// echoReply is xds.test.EchoReply: message = 1 (string), backend = 2 (string).
type echoReply struct {
	message string
	backend string
}

// wireMessage is a message echoCodec encodes by hand.
type wireMessage interface {
	marshal() []byte
	unmarshal([]byte) error
}

func (m *echoRequest) marshal() []byte {
	var b []byte
	if m.message != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, m.message)
	}
	if m.delayMs != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.delayMs))
	}
	return b
}

func (m *echoRequest) unmarshal(b []byte) error {
	*m = echoRequest{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			m.message = v
			return n, nil
		case num == 2 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			m.delayMs = uint32(v) // proto3 uint32: the low 32 bits
			return n, nil
		}
		return protowire.ConsumeFieldValue(num, typ, b), nil
	})
}

func (m *echoReply) marshal() []byte {
	var b []byte
	for _, f := range []struct {
		num   protowire.Number
		value string
	}{{1, m.message}, {2, m.backend}} {
		if f.value != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.value)
		}
	}
	return b
}

func (m *echoReply) unmarshal(b []byte) error {
	*m = echoReply{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeString(b)
			if num == 1 {
				m.message = v
			} else {
				m.backend = v
			}
			return n, nil
		}
		return protowire.ConsumeFieldValue(num, typ, b), nil
	})
}

// eachField calls field for every field of b with the bytes after its tag;
// field returns how many bytes the value took (negative: a protowire error).
// Unknown fields are skipped, as protobuf requires.
func eachField(b []byte, field func(protowire.Number, protowire.Type, []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		n, err := field(num, typ, b)
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// echoCodec encodes the echo messages by hand and everything else with gRPC's
// proto codec. It is forced on the echo server and on the client's calls;
// registering it globally would replace the codec of the xDS client's own
// stream.
type echoCodec struct{ proto encoding.CodecV2 }

func newEchoCodec() echoCodec { return echoCodec{proto: encoding.GetCodecV2("proto")} }

func (c echoCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(wireMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(m.marshal())}, nil
	}
	return c.proto.Marshal(v)
}

func (c echoCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(wireMessage); ok {
		return m.unmarshal(data.Materialize())
	}
	return c.proto.Unmarshal(data, v)
}

func (echoCodec) Name() string { return "proto" }

// echoHandler answers an echo request; the service description below routes
// the method to it through the server's interceptors (xDS routing, ORCA).
type echoHandler func(context.Context, *echoRequest) (*echoReply, error)

func echoServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "xds.test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
				handle := srv.(echoHandler)
				req := new(echoRequest)
				if err := dec(req); err != nil {
					return nil, err
				}
				if intercept == nil {
					return handle(ctx, req)
				}
				info := &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}
				return intercept(ctx, req, info, func(ctx context.Context, req any) (any, error) {
					return handle(ctx, req.(*echoRequest))
				})
			},
		}},
		Metadata: "xds-test-server/src/echo.rs",
	}
}
