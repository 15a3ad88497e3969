//! The file transfer: a client opens a bidirectional stream, asks for N
//! bytes (8 bytes, big-endian), the server sends them and finishes the
//! stream. The bytes are a fixed pattern (byte `i` is `i mod 251`), which
//! the client checks as they arrive, so a transfer that completes is
//! byte-exact, not only of the right length.

use bytes::Bytes;
use quinn::Connection;

use crate::QuicError;

/// The pattern's period: a prime, so no packet size lines up with it.
const PERIOD: usize = 251;
/// The server writes the file in chunks of this many bytes (a multiple of
/// [`PERIOD`], so every chunk starts the pattern afresh).
const CHUNK: usize = PERIOD * 4096;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % PERIOD) as u8).collect()
}

/// Serves every stream the peer opens on `conn` until it closes the
/// connection. Returns `Ok` on the peer's close.
pub async fn serve(conn: Connection) -> Result<(), QuicError> {
    let chunk = Bytes::from(pattern(CHUNK));
    loop {
        let (mut send, mut recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(quinn::ConnectionError::ApplicationClosed(_) | quinn::ConnectionError::LocallyClosed) => return Ok(()),
            Err(e) => return Err(QuicError::Connection(e)),
        };
        let mut req = [0u8; 8];
        recv.read_exact(&mut req).await.map_err(|e| QuicError::Stream(format!("request: {e}")))?;
        let mut left = u64::from_be_bytes(req);
        while left > 0 {
            let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
            send.write_chunk(chunk.slice(..n)).await.map_err(|e| QuicError::Stream(format!("send: {e}")))?;
            left -= n as u64;
        }
        send.finish().map_err(|e| QuicError::Stream(format!("finish: {e}")))?;
    }
}

/// Fetches `bytes` bytes on a new stream of `conn`, checking every byte;
/// returns once the server finished the stream.
pub async fn fetch(conn: &Connection, bytes: u64) -> Result<(), QuicError> {
    let expect = pattern(CHUNK);
    let (mut send, mut recv) = conn.open_bi().await.map_err(QuicError::Connection)?;
    send.write_all(&bytes.to_be_bytes()).await.map_err(|e| QuicError::Stream(format!("request: {e}")))?;
    send.finish().map_err(|e| QuicError::Stream(format!("finish: {e}")))?;
    let mut got = 0u64;
    while let Some(c) = recv.read_chunk(CHUNK, true).await.map_err(|e| QuicError::Stream(format!("receive: {e}")))? {
        check(&expect, c.offset, &c.bytes)?;
        got += c.bytes.len() as u64;
    }
    if got != bytes {
        return Err(QuicError::Short { got, want: bytes });
    }
    Ok(())
}

/// Checks that `data`, found at stream offset `offset`, is the pattern.
fn check(expect: &[u8], offset: u64, data: &[u8]) -> Result<(), QuicError> {
    let mut at = offset;
    for piece in data.chunks(expect.len() - PERIOD) {
        let start = (at % PERIOD as u64) as usize;
        if expect.get(start..start + piece.len()) != Some(piece) {
            let first = piece.iter().zip(&expect[start..]).position(|(a, b)| a != b).unwrap_or(0);
            return Err(QuicError::Corrupt { offset: at + first as u64 });
        }
        at += piece.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_check_accepts_any_offset_and_finds_the_bad_byte() {
        let expect = pattern(CHUNK);
        let stream = pattern(3 * CHUNK);
        for (off, len) in [(0usize, 10usize), (250, 9000), (CHUNK - 3, CHUNK + 700), (12_345, 2 * CHUNK)] {
            assert!(check(&expect, off as u64, &stream[off..off + len]).is_ok(), "{off} {len}");
        }
        let mut bad = stream[1000..1000 + 5000].to_vec();
        bad[4321] ^= 1;
        match check(&expect, 1000, &bad) {
            Err(QuicError::Corrupt { offset }) => assert_eq!(offset, 1000 + 4321),
            other => panic!("{other:?}"),
        }
    }
}
