//! What the test suites of the crates share, as a dev-dependency (rather
//! than one suite including another's files): a crate of its own, never
//! published, with no dependency but std and deathtensors-format.
//!
//! - `bytes`: deterministic test bytes (noise that does not compress).
//! - `properties`: what each fuzz target checks of an input (the fuzz
//!   crate's targets call them; format's regression tests replay the saved
//!   crashes through them).
//! - `scratch`: fresh directories, removed when dropped.
//! - `servers`: the object stores the remote tests start on loopback
//!   (moto, nginx, Azurite, fake-gcs-server), and the rule that a missing
//!   one fails the run when `DEATHTENSORS_REQUIRE_SERVERS` is set.

pub mod bytes;
pub mod properties;
pub mod scratch;
pub mod servers;
