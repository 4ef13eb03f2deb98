//! `--grpc-max-connection-age-grace`, as gRPC core applies it: a connection past
//! `--grpc-max-connection-age` gets GOAWAY (tonic sends it) and may finish its calls for the
//! grace period; then it is closed whatever still runs. This wraps each accepted TCP stream so
//! that, at age + grace, every read and write fails and the HTTP/2 layer drops the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{sleep, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// A TCP stream that stops working at its deadline (never, without one).
pub struct Deadlined {
    stream: TcpStream,
    deadline: Option<Pin<Box<Sleep>>>,
    expired: bool,
}

impl Deadlined {
    pub fn new(stream: TcpStream, after: Option<Duration>) -> Self {
        Deadlined { stream, deadline: after.map(|d| Box::pin(sleep(d))), expired: false }
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
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Deadlined {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.stream).poll_write(cx, data)
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
        let mut s = Deadlined::new(server, Some(Duration::from_millis(100)));
        peer.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        // A read waiting past the deadline ends with an error, not a hang.
        let err = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(s.write_all(b"x").await.is_err());
    }
}
