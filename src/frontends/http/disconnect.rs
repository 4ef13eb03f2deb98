//! Noticing an HTTP client that went away while its inference request waits or runs.
//!
//! actix-web keeps a handler running after its client has closed the connection, so a request
//! whose client gave up would stay in the model's queue and run for nobody. Each connection keeps
//! a duplicate of its socket (`Peer`, made at accept); a request that is not answered within
//! `WATCH_AFTER` watches it, and when the peer has closed (a read sees end of stream or a reset)
//! the handler drops its reply channel, so the scheduler takes the request out of the queue, or
//! the instance drops its result, as for a cancelled gRPC call.
//!
//! A client that half-closes its side after sending (shutdown of its write half) and still waits
//! for the answer looks the same as one that left; no HTTP client Triton users run does that.
//! A connection that already carries the next pipelined request cannot be told apart from a live
//! one and is not watched further.

use std::any::Any;
use std::os::fd::AsFd;
use std::time::Duration;

use actix_web::dev::Extensions;

/// How long a request may take before its connection is watched (most are answered sooner, and
/// pay nothing but a timer).
const WATCH_AFTER: Duration = Duration::from_millis(20);

/// A duplicate of a connection's socket, kept in the connection's data.
pub struct Peer(std::net::TcpStream);

/// `HttpServer::on_connect`: keeps a duplicate of each TCP connection's socket.
pub fn on_connect(conn: &dyn Any, data: &mut Extensions) {
    if let Some(stream) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
        if let Ok(fd) = stream.as_fd().try_clone_to_owned() {
            data.insert(Peer(std::net::TcpStream::from(fd)));
        }
    }
}

/// Resolves once the client of `peer` has closed its connection; never, while it is open.
pub async fn closed(peer: Option<&Peer>) {
    let Some(Peer(socket)) = peer else { return std::future::pending().await };
    tokio::time::sleep(WATCH_AFTER).await;
    let watch = socket.try_clone().and_then(tokio::net::TcpStream::from_std);
    let Ok(watch) = watch else { return std::future::pending().await };
    let mut byte = [0u8; 1];
    loop {
        if watch.readable().await.is_err() {
            return;
        }
        match watch.peek(&mut byte).await {
            Ok(0) => return,
            // The next request is already there: the client is alive.
            Ok(_) => return std::future::pending().await,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn pair() -> (std::net::TcpStream, Peer) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, Peer(server))
    }

    #[tokio::test]
    async fn a_closed_client_is_seen() {
        let (client, peer) = pair();
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), closed(Some(&peer))).await.expect("the close is seen");
    }

    #[tokio::test]
    async fn an_open_client_is_not_taken_for_gone_even_with_a_pipelined_request() {
        let (mut client, peer) = pair();
        let quiet = tokio::time::timeout(Duration::from_millis(200), closed(Some(&peer))).await;
        assert!(quiet.is_err(), "an idle open connection is alive");
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let busy = tokio::time::timeout(Duration::from_millis(200), closed(Some(&peer))).await;
        assert!(busy.is_err(), "a connection with the next request waiting is alive");
        let none = tokio::time::timeout(Duration::from_millis(50), closed(None)).await;
        assert!(none.is_err(), "without a peer nothing is watched");
    }
}
