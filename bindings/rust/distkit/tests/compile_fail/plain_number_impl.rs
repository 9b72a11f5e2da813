//! A user's PlainNumber impl must not compile (the trait is sealed): the
//! crate's unsafe code writes arbitrary bytes into PlainNumbers and reads
//! all of theirs, so a bool or a padded struct would be undefined behaviour
//! from safe code. Built by plain_number_sealed_test.sh twice: as is (must
//! fail), and with `--cfg control` (must build: the rest of the file is fine).

#[derive(Clone, Copy)]
pub struct Flag(pub bool);

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Padded {
    pub a: u8,
    pub b: u32,
}

#[cfg(not(control))]
impl distkit::PlainNumber for Flag {}

#[cfg(not(control))]
impl distkit::PlainNumber for Padded {}

pub fn uses(snapshot: &distkit::ShardedSnapshot) -> distkit::Result<usize> {
    Ok(snapshot.shard_as::<f32>(0, 0)?.len())
}
