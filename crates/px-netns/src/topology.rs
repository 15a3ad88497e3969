//! A set of namespaces, links and background processes torn down together.
//!
//! [`Topology`] is what `px lab demo/up` and the root tests build on. It
//! installs the SIGINT/SIGTERM cleanup on creation, and its fields drop in
//! the order that makes teardown complete: processes first (a namespace
//! with a live process in it would outlive `ip netns del`), then the
//! namespaces, which takes their veth links with them.

use std::fmt::Write as _;

use crate::LabError;
use crate::cleanup::install_signal_cleanup;
use crate::link::Veth;
use crate::netns::{LabChild, Netns};

/// Index of a namespace in a [`Topology`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NsId(usize);

/// Index of a link in a [`Topology`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkId(usize);

/// Namespaces, links and processes owned together. Field order is the
/// drop order (see the module docs).
#[derive(Debug)]
pub struct Topology {
    children: Vec<LabChild>,
    links: Vec<Veth>,
    namespaces: Vec<Netns>,
}

impl Topology {
    /// An empty topology; installs the signal cleanup (idempotent).
    pub fn new() -> Result<Topology, LabError> {
        install_signal_cleanup().map_err(LabError::Signal)?;
        Ok(Topology { children: Vec::new(), links: Vec::new(), namespaces: Vec::new() })
    }

    /// Adds a namespace playing `role`.
    pub fn add_ns(&mut self, role: &str) -> Result<NsId, LabError> {
        self.namespaces.push(Netns::new(role)?);
        Ok(NsId(self.namespaces.len() - 1))
    }

    /// The namespace `id`.
    pub fn ns(&self, id: NsId) -> &Netns {
        &self.namespaces[id.0]
    }

    /// Adds a veth pair `a.0:a.1 <-> b.0:b.1` with `mtu` on both ends, up.
    pub fn add_veth(&mut self, a: (NsId, &str), b: (NsId, &str), mtu: u32) -> Result<LinkId, LabError> {
        let v = Veth::create(self.ns(a.0), a.1, self.ns(b.0), b.1, mtu)?;
        self.links.push(v);
        Ok(LinkId(self.links.len() - 1))
    }

    /// The link `id`.
    pub fn link(&self, id: LinkId) -> &Veth {
        &self.links[id.0]
    }

    /// Starts `program args` in namespace `ns`; killed at teardown.
    pub fn spawn(&mut self, ns: NsId, program: &str, args: &[&str]) -> Result<&mut LabChild, LabError> {
        let c = self.ns(ns).spawn(program, args)?;
        self.children.push(c);
        let last = self.children.len() - 1;
        Ok(&mut self.children[last])
    }

    /// A human-readable listing: each namespace with its addresses and
    /// each link with its MTU (what `px lab up` prints).
    pub fn describe(&self) -> Result<String, LabError> {
        let mut s = String::new();
        for ns in &self.namespaces {
            let _ = writeln!(s, "{}", ns.name());
            let out = ns.ip(&["-br", "addr", "show"])?;
            for line in out.lines().filter(|l| !l.starts_with("lo ")) {
                let _ = writeln!(s, "  {line}");
            }
        }
        for l in &self.links {
            let _ = writeln!(s, "link {}:{} <-> {}:{} mtu {}", l.a.ns, l.a.dev, l.b.ns, l.b.dev, l.mtu);
        }
        Ok(s)
    }

    /// Keeps the namespaces after the topology drops (`px lab up`); returns
    /// their names. Processes are still killed.
    pub fn persist(mut self) -> Vec<String> {
        std::mem::take(&mut self.namespaces).into_iter().map(Netns::persist).collect()
    }
}
