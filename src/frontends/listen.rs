//! Binding a frontend's listening socket, as Triton does: `SO_REUSEADDR` always, and
//! `SO_REUSEPORT` with `--reuse-http-port` / `--reuse-grpc-port`, so that several servers that
//! all ask for it share one port (the kernel spreads the connections between them).

use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Socket, Type};

/// A listening, non-blocking TCP socket on `addr`.
pub fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_shared_only_when_every_socket_asks() {
        let first = bind("127.0.0.1:0".parse().unwrap(), true).unwrap();
        let addr = first.local_addr().unwrap();
        let second = bind(addr, true).expect("both ask for SO_REUSEPORT: shared");
        assert_eq!(second.local_addr().unwrap(), addr);
        assert!(bind(addr, false).is_err(), "a socket without it is refused");
        let plain = bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        assert!(bind(plain.local_addr().unwrap(), true).is_err(), "nor can it join one without it");
    }
}
