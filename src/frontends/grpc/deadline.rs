//! `--grpc-max-connection-age-grace`, as gRPC core applies it: a connection past
//! `--grpc-max-connection-age` gets GOAWAY (tonic sends it) and may finish its calls for the
//! grace period; then it is closed whatever still runs. This wraps each accepted TCP stream so
//! that, at age + grace, every read and write fails and the HTTP/2 layer drops the connection.
//! The stream also holds its connection's place under `--grpc-max-connections` until it is
//! dropped, and a connection that has not sent the 24 bytes of HTTP/2's connection preface (or
//! of its TLS handshake) within `PREFACE_TIMEOUT` is closed: a client that connects and sends
//! nothing holds no place for long, as actix's request-head timeout does for HTTP.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{sleep, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How long a new connection may take to send its first `PREFACE_BYTES`.
pub const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);
/// The length of HTTP/2's client connection preface (`PRI * HTTP/2.0...`).
const PREFACE_BYTES: usize = 24;

/// A TCP stream that stops working at its deadline (never, without one).
pub struct Deadlined {
    stream: TcpStream,
    deadline: Option<Pin<Box<Sleep>>>,
    expired: bool,
    /// Until the preface is in: its deadline and how many of its bytes are still to come.
    preface: Option<(Pin<Box<Sleep>>, usize)>,
    /// The connection's place under `--grpc-max-connections`, given back on drop.
    _place: Option<OwnedSemaphorePermit>,
}

impl Deadlined {
    pub fn new(stream: TcpStream, after: Option<Duration>, place: Option<OwnedSemaphorePermit>) -> Self {
        Deadlined {
            stream,
            deadline: after.map(|d| Box::pin(sleep(d))),
            expired: false,
            preface: Some((Box::pin(sleep(PREFACE_TIMEOUT)), PREFACE_BYTES)),
            _place: place,
        }
    }

    #[cfg(test)]
    fn with_preface_timeout(mut self, timeout: Duration) -> Self {
        self.preface = Some((Box::pin(sleep(timeout)), PREFACE_BYTES));
        self
    }

    /// Err once the preface is overdue (and wakes the task when it is).
    fn check_preface(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some((deadline, _)) = &mut self.preface else { return Ok(()) };
        if deadline.as_mut().poll(cx).is_ready() {
            Err(io::Error::new(io::ErrorKind::TimedOut, "no HTTP/2 connection preface in time"))
        } else {
            Ok(())
        }
    }

    /// Err once the deadline has passed (and wakes the task when it does).
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.expired {
            if let Some(d) = &mut self.deadline {
                if d.as_mut().poll(cx).is_ready() {
                    self.expired = true;
                }
            }
        }
        if self.expired {
            Err(io::Error::new(io::ErrorKind::TimedOut, "gRPC connection past its max age and grace"))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for Deadlined {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx).and_then(|()| self.check_preface(cx)) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some((_, left))) = (&read, &mut self.preface) {
            *left = left.saturating_sub(buf.filled().len() - before);
            if *left == 0 {
                self.preface = None;
            }
        }
        read
    }
}

impl AsyncWrite for Deadlined {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    /// h2 writes a frame's head and its payload as two slices: one `writev`, not two writes.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Connected for Deadlined {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn reads_and_writes_fail_after_the_deadline_only() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (server, _) = listener.accept().await.unwrap();
        let mut peer = client.await.unwrap();
        let mut s = Deadlined::new(server, Some(Duration::from_millis(100)), None);
        peer.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        // A read waiting past the deadline ends with an error, not a hang.
        let err = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(s.write_all(b"x").await.is_err());
    }

    #[tokio::test]
    async fn a_connection_must_send_its_preface_in_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (server, _) = listener.accept().await.unwrap();
        let mut peer = client.await.unwrap();
        let mut s = Deadlined::new(server, None, None).with_preface_timeout(Duration::from_millis(200));
        // A few bytes are not the preface: the deadline still stands.
        peer.write_all(b"PRI * HTTP").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(s.read(&mut buf).await.unwrap(), 10);
        let err = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        // One whose preface came in time may then stay quiet past it.
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (server, _) = listener.accept().await.unwrap();
        let mut peer = client.await.unwrap();
        let mut s = Deadlined::new(server, None, None).with_preface_timeout(Duration::from_millis(200));
        peer.write_all(&[b'x'; 24]).await.unwrap();
        let mut got = 0;
        while got < 24 {
            got += s.read(&mut buf).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        peer.write_all(b"later").await.unwrap();
        assert_eq!(s.read(&mut buf).await.unwrap(), 5);
    }
}
