//! How remote objects are reached and read.

use std::io;
use std::time::Duration;

use crate::cache::Cache;
use crate::stats::Stats;

/// Options of remote reads: the store's own configuration, and how ranges
/// are requested.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Configuration for the store, as object_store's builders name it (for
    /// example `aws_endpoint`, `aws_region`, `aws_access_key_id`,
    /// `google_service_account`, `azure_storage_account_name`, or client
    /// options such as `timeout`, `allow_http`): what fsspec users pass as
    /// `storage_options`. The environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`)
    /// is read first; these override it.
    ///
    /// This crate reads five of them itself, the same for every store, and
    /// refuses a malformed value: `max_retries`, `retry_timeout`, `timeout`
    /// and `connect_timeout` (a duration: `30s`, `500ms`, `2m`, or seconds)
    /// set the fields of those names, and `allow_http` (`true`, `false`)
    /// overrides whether plain HTTP is allowed (by default, when the URL or
    /// the endpoint is `http://`).
    pub storage_options: Vec<(String, String)>,
    /// The first request's length: the prefix and most headers fit, and a
    /// longer head costs one more request. Default 64 KiB.
    pub first_read: u64,
    /// Reads longer than this are split into parts fetched in parallel.
    /// Default 8 MiB: large enough that a request's latency is small beside
    /// its transfer, small enough that a 1 GiB read has 128 parts to share.
    pub part_size: u64,
    /// How many requests are in flight at once for one read. Default 8.
    pub concurrency: usize,
    /// Retries of a failed request (connection errors, 5xx, timeouts, a
    /// body cut short), each after a backoff. Default 3; storage option
    /// `max_retries`.
    pub retries: u32,
    /// The first backoff; each retry doubles it, up to 5 s. Default 100 ms.
    pub backoff: Duration,
    /// How long connecting to the server may take. Default 5 s; storage
    /// option `connect_timeout`.
    pub connect_timeout: Duration,
    /// How long one request may take, its whole body included: a part of
    /// [`part_size`](Self::part_size) must arrive within it. Default 30 s;
    /// storage option `timeout`.
    pub timeout: Duration,
    /// How long one request may take with all its retries: past it, a read
    /// fails with `TimedOut`. Default 50 s; storage option `retry_timeout`.
    ///
    /// A server that never answers, answers slowly or stalls fails within
    /// the smaller of `retry_timeout` and (`retries` + 1) × `timeout` plus
    /// the backoffs. With the defaults that is 50 s per request, and an
    /// open of a dead server fails within 50 s. See:
    /// <https://github.com/death-legion/deathtensors/issues/30>
    pub retry_timeout: Duration,
    /// Neighbouring ranges of [`prefetch`](crate::prefetch) closer than this
    /// are fetched as one. Default 1 MiB.
    pub coalesce_gap: u64,
    /// Counters of requests and bytes, shared with the caller.
    pub stats: Stats,
    /// A local cache of fetched ranges. Default none;
    /// [`RemoteOptions::from_env`] sets one from `DEATHTENSORS_REMOTE_CACHE`.
    pub cache: Option<Cache>,
}

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            storage_options: Vec::new(),
            first_read: 64 << 10,
            part_size: 8 << 20,
            concurrency: 8,
            retries: 3,
            backoff: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            retry_timeout: Duration::from_secs(50),
            coalesce_gap: 1 << 20,
            stats: Stats::default(),
            cache: None,
        }
    }
}

/// The cache's budget when `DEATHTENSORS_REMOTE_CACHE_MAX_BYTES` is unset.
const DEFAULT_CACHE_BYTES: u64 = 10 << 30;

impl RemoteOptions {
    /// The defaults, with a cache when the environment asks for one:
    /// `DEATHTENSORS_REMOTE_CACHE` (a directory) and
    /// `DEATHTENSORS_REMOTE_CACHE_MAX_BYTES` (default 10 GiB). The command
    /// line and the Python package start from these.
    pub fn from_env() -> RemoteOptions {
        let cache = std::env::var_os("DEATHTENSORS_REMOTE_CACHE").filter(|d| !d.is_empty()).map(|dir| {
            let max = std::env::var("DEATHTENSORS_REMOTE_CACHE_MAX_BYTES")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_CACHE_BYTES);
            Cache::new(dir, max)
        });
        RemoteOptions { cache, ..RemoteOptions::default() }
    }

    /// Adds a store configuration entry (see
    /// [`RemoteOptions::storage_options`]).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> RemoteOptions {
        self.storage_options.push((key.into(), value.into()));
        self
    }
}

/// The options with the storage options this crate reads itself parsed
/// into fields and taken out of `storage_options`: what the store and the
/// reads are made from.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) options: RemoteOptions,
    /// `allow_http` as given; `None`: allowed for `http://` URLs and
    /// endpoints only.
    pub(crate) allow_http: Option<bool>,
}

impl RemoteOptions {
    /// Parses and checks the storage options this crate reads itself
    /// (`max_retries`, `retry_timeout`, `timeout`, `connect_timeout`,
    /// `allow_http`); the others are left for the store's builder.
    ///
    /// # Errors
    /// `InvalidInput` for a value that is not a number of retries, a
    /// duration longer than zero, or a boolean, as the option wants.
    pub(crate) fn resolve(&self) -> io::Result<Resolved> {
        let mut options = RemoteOptions { storage_options: Vec::new(), ..self.clone() };
        let mut allow_http = None;
        for (key, value) in &self.storage_options {
            match key.to_ascii_lowercase().as_str() {
                "max_retries" => options.retries = retries(key, value)?,
                "retry_timeout" => options.retry_timeout = duration(key, value)?,
                "timeout" => options.timeout = duration(key, value)?,
                "connect_timeout" => options.connect_timeout = duration(key, value)?,
                "allow_http" => allow_http = Some(boolean(key, value)?),
                _ => options.storage_options.push((key.clone(), value.clone())),
            }
        }
        for (what, d) in [
            ("timeout", options.timeout),
            ("connect_timeout", options.connect_timeout),
            ("retry_timeout", options.retry_timeout),
        ] {
            if d.is_zero() {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{what} must be longer than zero")));
            }
        }
        Ok(Resolved { options, allow_http })
    }
}

fn bad_value(key: &str, value: &str, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("storage option {key}: {value:?} {why}"))
}

/// A number of retries: `3`.
fn retries(key: &str, value: &str) -> io::Result<u32> {
    value.trim().parse().map_err(|_| bad_value(key, value, "is not a number of retries (e.g. 3)"))
}

/// `true` or `false` (or `1`, `0`, `yes`, `no`, `on`, `off`), as
/// object_store reads its own boolean options.
fn boolean(key: &str, value: &str) -> io::Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(bad_value(key, value, "is not true or false")),
    }
}

/// A duration longer than zero: a number and a unit (`500ms`, `30s`,
/// `2m`, `1h`), or a number of seconds (`2`, `0.5`), as fsspec users pass.
fn duration(key: &str, value: &str) -> io::Result<Duration> {
    let not = || bad_value(key, value, "is not a duration (e.g. 30s, 500ms)");
    let text = value.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| not())?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => number,
        "ms" | "millis" | "milliseconds" => number / 1e3,
        "m" | "min" | "mins" | "minute" | "minutes" => number * 60.0,
        "h" | "hour" | "hours" => number * 3600.0,
        _ => return Err(not()),
    };
    let d = Duration::try_from_secs_f64(seconds).map_err(|_| not())?;
    if d.is_zero() {
        return Err(bad_value(key, value, "must be longer than zero"));
    }
    Ok(d)
}

/// The longest backoff, object_store's and ours.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(options: &[(&str, &str)], expected: Result<(u32, u64, u64, u64, Option<bool>), &str>) {
        let mut o = RemoteOptions::default();
        for (k, v) in options {
            o = o.with(*k, *v);
        }
        let got = o.resolve().map(|r| {
            let o = &r.options;
            let ms = |d: Duration| d.as_millis() as u64;
            (o.retries, ms(o.connect_timeout), ms(o.timeout), ms(o.retry_timeout), r.allow_http)
        });
        match (got, expected) {
            (Ok(got), Ok(expected)) => assert_eq!(got, expected),
            (Err(e), Err(expected)) => assert_eq!(e.to_string(), expected),
            (got, expected) => panic!("{got:?} instead of {expected:?}"),
        }
    }

    #[test]
    fn defaults() {
        check(&[], Ok((3, 5_000, 30_000, 50_000, None)));
    }

    #[test]
    fn values() {
        check(
            &[("max_retries", "0"), ("TIMEOUT", "2s"), ("connect_timeout", "500ms")],
            Ok((0, 500, 2_000, 50_000, None)),
        );
        check(&[("retry_timeout", "1.5"), ("allow_http", "False")], Ok((3, 5_000, 30_000, 1_500, Some(false))));
        check(&[("retry_timeout", "2m"), ("allow_http", "true")], Ok((3, 5_000, 30_000, 120_000, Some(true))));
    }

    #[test]
    fn malformed_values_are_refused() {
        check(
            &[("retry_timeout", "5x")],
            Err("storage option retry_timeout: \"5x\" is not a duration (e.g. 30s, 500ms)"),
        );
        check(&[("timeout", "")], Err("storage option timeout: \"\" is not a duration (e.g. 30s, 500ms)"));
        check(&[("timeout", "-1s")], Err("storage option timeout: \"-1s\" is not a duration (e.g. 30s, 500ms)"));
        check(&[("timeout", "0s")], Err("storage option timeout: \"0s\" must be longer than zero"));
        check(
            &[("max_retries", "three")],
            Err("storage option max_retries: \"three\" is not a number of retries (e.g. 3)"),
        );
        check(&[("allow_http", "maybe")], Err("storage option allow_http: \"maybe\" is not true or false"));
    }
}
