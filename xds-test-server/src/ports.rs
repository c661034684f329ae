//! Loopback ports that refuse connections yet stay taken: a socket bound to the port
//! but not listening. The kernel answers a connection attempt with a reset, and no
//! other socket of the test process (a server another test starts on port 0, a
//! client's outgoing connection) can be given the port meanwhile. A port merely
//! closed is free for the next `bind(0)` and was once in a while taken by a parallel
//! test before a stopped server rebound it.

use std::net::SocketAddr;

use socket2::{Domain, Socket, Type};

/// A port of 127.0.0.1 that refuses connections for as long as this lives.
#[derive(Debug)]
pub struct RefusingPort {
    socket: Socket,
    addr: SocketAddr,
}

impl RefusingPort {
    /// A fresh port.
    ///
    /// # Panics
    /// When no port of 127.0.0.1 can be bound.
    pub fn new() -> RefusingPort {
        RefusingPort::at(SocketAddr::from(([127, 0, 0, 1], 0))).expect("a loopback port")
    }

    /// `addr`'s port, which a listener just closed (`SO_REUSEADDR` lets the bind
    /// through its connections in TIME_WAIT): a test holds the port of a backend
    /// process it stopped until it starts it again.
    ///
    /// # Errors
    /// The port cannot be bound (another socket listens on it).
    pub fn at(addr: SocketAddr) -> std::io::Result<RefusingPort> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        let addr = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| std::io::Error::other("not an IP socket"))?;
        Ok(RefusingPort { socket, addr })
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Listens on the port at last.
    pub(crate) fn listen(self) -> std::io::Result<std::net::TcpListener> {
        self.socket.listen(1024)?;
        Ok(self.socket.into())
    }
}

impl Default for RefusingPort {
    fn default() -> RefusingPort {
        RefusingPort::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_connections_keeps_the_port_and_listens_on_it_later() {
        let port = RefusingPort::new();
        let addr = SocketAddr::from(([127, 0, 0, 1], port.port()));
        let refused = std::net::TcpStream::connect(addr).expect_err("nothing listens");
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        // A bind without SO_REUSEADDR, as a port chosen by the kernel is, fails.
        let other = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
        let taken = other.bind(&addr.into()).expect_err("the port stays taken");
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
        let listener = port.listen().expect("listen");
        let _client = std::net::TcpStream::connect(addr).expect("now it listens");
        assert!(listener.accept().is_ok());
    }
}
