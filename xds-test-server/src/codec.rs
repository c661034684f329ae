//! The server's gRPC codec: decodes requests, and encodes either a response or raw
//! bytes that are no response at all (to test how a client treats them). One codec
//! serves both ADS methods: SotW (`DiscoveryRequest` in, `DiscoveryResponse` out) and
//! delta (`DeltaDiscoveryRequest` in, `DeltaDiscoveryResponse` out).

use std::marker::PhantomData;

use bytes::{BufMut, Bytes};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// One message the server sends on an ADS stream.
pub(crate) enum Outbound<T> {
    /// A response.
    Response(T),
    /// Bytes sent as they are.
    Raw(Bytes),
}

/// A message no protobuf decoder takes for a `DiscoveryResponse` or a
/// `DeltaDiscoveryResponse`: its field 1 (`version_info`, `system_version_info`, a
/// string in both) is not UTF-8.
pub(crate) const UNDECODABLE: &[u8] = &[0x0a, 0x02, 0xff, 0xfe];

/// Encodes [`Outbound`] responses of type `Resp` and decodes requests of type `Req`.
pub(crate) struct ServerCodec<Req, Resp>(PhantomData<fn(Req) -> Resp>);

impl<Req, Resp> Default for ServerCodec<Req, Resp> {
    fn default() -> Self {
        ServerCodec(PhantomData)
    }
}

impl<Req, Resp> Codec for ServerCodec<Req, Resp>
where
    Req: Message + Default + Send + 'static,
    Resp: Message + Send + 'static,
{
    type Encode = Outbound<Resp>;
    type Decode = Req;
    type Encoder = ServerCodec<Req, Resp>;
    type Decoder = ServerCodec<Req, Resp>;

    fn encoder(&mut self) -> Self::Encoder {
        ServerCodec::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ServerCodec::default()
    }
}

impl<Req, Resp: Message> Encoder for ServerCodec<Req, Resp> {
    type Item = Outbound<Resp>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Outbound<Resp>,
        dst: &mut EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
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

impl<Req: Message + Default, Resp> Decoder for ServerCodec<Req, Resp> {
    type Item = Req;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Req>, tonic::Status> {
        Req::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}
