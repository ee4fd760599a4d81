//! The Redis server's clock: its `TIME` answer read for the keeper's watch of the server's clock
//! ([`ServerClock`](crate::core::server_clock::ServerClock)); a key's expiry is a time on it, and
//! Redis 7 replicates it as one.

/// The server's `TIME` answer (seconds and microseconds, as text) in µs since the epoch.
pub(crate) fn time_us(answer: &redis::Value) -> Option<i128> {
    let redis::Value::Array(parts) = answer else {
        return None;
    };
    let number = |v: &redis::Value| -> Option<i128> {
        match v {
            redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            redis::Value::Int(i) => Some(i128::from(*i)),
            _ => None,
        }
    };
    match parts.as_slice() {
        [s, us] => Some(number(s)? * 1_000_000 + number(us)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000;

    #[test]
    fn the_servers_time_answer_is_read() {
        use redis::Value::{Array, BulkString};
        let answer = Array(vec![
            BulkString(b"1800000000".to_vec()),
            BulkString(b"250".to_vec()),
        ]);
        assert_eq!(time_us(&answer), Some(1_800_000_000 * S + 250));
        assert_eq!(time_us(&redis::Value::Int(3)), None);
    }
}
