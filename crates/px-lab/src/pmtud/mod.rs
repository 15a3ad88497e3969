//! `px lab pmtud`: path MTU discovery tools compared on lab paths.
//!
//! [`path`] builds the paths (a prober, routers with chosen link MTUs and
//! obstacles, a responder; `px probe`'s root tests use them too);
//! [`compare`] runs every tool on each of [`standard_paths`] and renders
//! the table and JSON.

pub mod compare;
pub mod path;

pub use path::{PathSpec, PmtudLab, RouterFilter, WireSpec, apply_filter, lossy_path, standard_paths};
