//! Files for deathtensors (filled by a later issue).
