//! The names of the files of checkpoints made of several files (docs/
//! DISTRIBUTED.md, docs/FORMAT.md's sharded checkpoints): a distributed
//! checkpoint's metadata documents, its ranks' files and the blocks in
//! them, the marker of a save that has not committed, and a sharded
//! checkpoint's index. Names in, names out: the one place each is spelled.

use alloc::string::String;
use alloc::vec::Vec;

/// The metadata document's name in a distributed checkpoint's directory:
/// its presence is the commit of a save.
pub const DCP_METADATA: &str = "deathtensors.json";

/// The suffix of a sharded checkpoint's index (`model.safetensors.index.json`).
pub const INDEX_SUFFIX: &str = ".index.json";

/// Whether `id` is a save id: 16 lowercase hex digits.
pub fn is_save_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A rank number of 5 to 9 digits, as the names below spell it.
fn rank_digits(rank: &str) -> Option<u64> {
    ((5..=9).contains(&rank.len()) && rank.bytes().all(|b| b.is_ascii_digit())).then(|| rank.parse().ok()).flatten()
}

/// A rank's file of one save: `rank-00003-<save id>.dt` (`ext` `dt` or
/// `safetensors`).
pub fn rank_file_name(rank: u64, save_id: &str, ext: &str) -> String {
    alloc::format!("rank-{rank:05}-{save_id}.{ext}")
}

/// The (rank, save id) of a rank file's name ([`rank_file_name`]), or
/// `None` for other names.
pub fn parse_rank_file_name(name: &str) -> Option<(u64, &str)> {
    let (rank, rest) = name.strip_prefix("rank-")?.split_once('-')?;
    let (id, ext) = rest.split_once('.')?;
    let rank = rank_digits(rank)?;
    (is_save_id(id) && matches!(ext, "dt" | "safetensors")).then_some((rank, id))
}

/// The metadata document of one rank's checkpoint, saved without
/// collectives (`dcp.save(..., use_collectives=False)`):
/// `deathtensors.rank-00003.json`, beside which each rank commits its own.
pub fn rank_metadata_name(rank: u64) -> String {
    alloc::format!("deathtensors.rank-{rank:05}.json")
}

/// The rank of a per-rank metadata document's name
/// ([`rank_metadata_name`]), or `None` for other names.
pub fn parse_rank_metadata_name(name: &str) -> Option<u64> {
    rank_digits(name.strip_prefix("deathtensors.rank-")?.strip_suffix(".json")?)
}

/// The marker of a save that has not committed (who runs it, since
/// when): `deathtensors.saving-<save id>.json`, written by the save's
/// coordinator before any rank writes and removed after its commit.
pub fn save_marker_name(save_id: &str) -> String {
    alloc::format!("deathtensors.saving-{save_id}.json")
}

/// The save id of a save marker's name ([`save_marker_name`]), or `None`
/// for other names.
pub fn parse_save_marker_name(name: &str) -> Option<&str> {
    let id = name.strip_prefix("deathtensors.saving-")?.strip_suffix(".json")?;
    is_save_id(id).then_some(id)
}

/// The tensor name of a block in a rank file: its tensor's name and its
/// global offsets (`w@0,256`).
pub fn block_name(fqn: &str, offsets: &[u64]) -> String {
    let offsets: Vec<String> = offsets.iter().map(|o| alloc::format!("{o}")).collect();
    alloc::format!("{fqn}@{}", offsets.join(","))
}

/// Whether `name` is a checkpoint's own file, by name: a distributed
/// checkpoint's metadata document (whole or a rank's), or a sharded
/// checkpoint's index.
pub fn is_checkpoint_document(name: &str) -> bool {
    name == DCP_METADATA || parse_rank_metadata_name(name).is_some() || name.ends_with(INDEX_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_others_do_not() {
        let id = "0123456789abcdef";
        assert_eq!(parse_rank_file_name(&rank_file_name(3, id, "dt")), Some((3, id)));
        assert_eq!(parse_rank_file_name(&rank_file_name(123_456, id, "safetensors")), Some((123_456, id)));
        assert_eq!(parse_rank_file_name("rank-00003-0123456789ABCDEF.dt"), None);
        assert_eq!(parse_rank_file_name("rank-3-0123456789abcdef.dt"), None);
        assert_eq!(parse_rank_file_name("rank-00003-0123456789abcdef.pt"), None);
        assert_eq!(parse_rank_metadata_name(&rank_metadata_name(7)), Some(7));
        assert_eq!(parse_rank_metadata_name("deathtensors.rank-7.json"), None);
        assert_eq!(parse_rank_metadata_name("deathtensors.rank-0000x.json"), None);
        assert_eq!(parse_save_marker_name(&save_marker_name(id)), Some(id));
        assert_eq!(parse_save_marker_name("deathtensors.saving-0123.json"), None);
        assert_eq!(parse_save_marker_name("deathtensors.saving-0123456789abcdeg.json"), None);
        assert_eq!(block_name("w", &[0, 256]), "w@0,256");
        assert_eq!(block_name("s", &[]), "s@");
        assert!(is_checkpoint_document(DCP_METADATA) && is_checkpoint_document("m.safetensors.index.json"));
        assert!(!is_checkpoint_document("rank-00003-0123456789abcdef.dt"));
    }
}
