//! One module per `px` subcommand.

pub mod bench;
pub mod bench_gateway;
pub mod caravan;
pub mod fpmtud;
pub mod gateway;
pub mod generate;
pub mod lab;
pub mod lab_border;
pub mod lab_demo;
pub mod lab_exp;
pub mod lab_pmtud;
pub mod lab_quic;
pub mod lab_rr;
pub mod lab_rtt;
pub mod lab_survey;
pub mod probe;
pub mod sim;
pub mod status;
pub mod survey;
