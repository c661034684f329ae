//! The server's gRPC codec: decodes requests, and encodes either a response or raw
//! bytes that are no `DiscoveryResponse` at all (to test how a client treats them).

use bytes::{BufMut, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use xds_proto_core::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};

/// One message the server sends on an ADS stream.
pub(crate) enum Outbound {
    /// A response.
    Response(DiscoveryResponse),
    /// Bytes sent as they are.
    Raw(Bytes),
}

/// A message no protobuf decoder takes for a `DiscoveryResponse`: its `version_info`
/// (field 1, a string) is not UTF-8.
pub(crate) const UNDECODABLE: &[u8] = &[0x0a, 0x02, 0xff, 0xfe];

/// Encodes [`Outbound`] messages and decodes `DiscoveryRequest`s.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServerCodec;

impl Codec for ServerCodec {
    type Encode = Outbound;
    type Decode = DiscoveryRequest;
    type Encoder = ServerCodec;
    type Decoder = ServerCodec;

    fn encoder(&mut self) -> ServerCodec {
        ServerCodec
    }

    fn decoder(&mut self) -> ServerCodec {
        ServerCodec
    }
}

impl Encoder for ServerCodec {
    type Item = Outbound;
    type Error = tonic::Status;

    fn encode(&mut self, item: Outbound, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        match item {
            Outbound::Response(response) => response
                .encode(dst)
                .map_err(|e| tonic::Status::internal(e.to_string())),
            Outbound::Raw(bytes) => {
                dst.put_slice(&bytes);
                Ok(())
            }
        }
    }
}

impl Decoder for ServerCodec {
    type Item = DiscoveryRequest;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut DecodeBuf<'_>,
    ) -> Result<Option<DiscoveryRequest>, tonic::Status> {
        DiscoveryRequest::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}
