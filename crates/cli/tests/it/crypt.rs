//! `keygen`, `encrypt`, `decrypt`, `sign`, `verify --signer` and what
//! `inspect` shows of encrypted and signed files, through the real binary.

use std::path::Path;

use crate::{assert_one_error_line, check, json, testdata, valid, Scratch};

fn keygen(dir: &Scratch, kind: &str, name: &str, public: bool) {
    let out = dir.path(&format!("{name}.jwk"));
    let mut args = vec!["keygen".to_string(), "--type".into(), kind.into(), "--kid".into(), name.into()];
    args.extend(["--out".into(), out.to_string_lossy().into_owned()]);
    if public {
        args.extend(["--public-out".into(), dir.path(&format!("{name}.pub.jwk")).to_string_lossy().into_owned()]);
    }
    check(&args, 0);
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn encrypt_inspect_verify_decrypt_round_trip() {
    let dir = Scratch::new("crypt-roundtrip");
    keygen(&dir, "symmetric", "team", false);
    keygen(&dir, "x25519", "alice", true);
    keygen(&dir, "ed25519", "publisher", true);
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let enc = dir.path("enc.dt");
    let (team, alice, alice_pub) = (dir.path("team.jwk"), dir.path("alice.jwk"), dir.path("alice.pub.jwk"));
    let (publisher, publisher_pub) = (dir.path("publisher.jwk"), dir.path("publisher.pub.jwk"));
    check(
        ["encrypt", p(&src), p(&enc), "--to", p(&team), "--to", p(&alice_pub), "--sign", p(&publisher), "--checksum"],
        0,
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&team).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "secret key files are private");
    }

    // inspect needs no key.
    let v = json(["inspect", p(&enc)], 0);
    assert_eq!(v["flags"]["encrypted"], true);
    assert_eq!(v["flags"]["signed"], true);
    assert_eq!(v["encryption"]["cipher"], "AES-256-GCM");
    let kinds: Vec<_> = v["encryption"]["recipients"].as_array().unwrap().iter().map(|r| r["kind"].clone()).collect();
    assert_eq!(kinds, ["symmetric", "x25519"]);
    assert_eq!(v["signers"].as_array().unwrap().len(), 1);

    // verify: without a key its tags cannot be checked, so it is not "ok"
    // (the stricter rule, as Python's verify()): exit 1 saying what did
    // pass, unless --allow-missing accepts that; with a key every tag too.
    let r = check(["verify", p(&enc), "--signer", p(&publisher_pub)], 1);
    assert_one_error_line(
        &r,
        &[
            "no key given opens it",
            "verifies (a key you trust)",
            "footer and 18 tensor digests match",
            "tags were not checked",
        ],
    );
    let v = json(["verify", p(&enc), "--signer", p(&publisher_pub)], 1);
    assert_eq!(v["ok"], false);
    let v = json(["verify", p(&enc), "--signer", p(&publisher_pub), "--allow-missing"], 0);
    assert_eq!(v["checked"]["tags"], "not checked (no key)");
    assert_eq!(v["verdict"], "encrypted, no key: tags not checked (allowed)");
    let v = json(["verify", p(&enc), "--key", p(&alice), "--signer", p(&publisher_pub)], 0);
    assert_eq!(v["checked"]["tags"], "ok");
    assert_eq!(v["ok"], true);
    // A signer that did not sign: exit 1.
    keygen(&dir, "ed25519", "stranger", true);
    let r = check(["verify", p(&enc), "--signer", p(&dir.path("stranger.pub.jwk"))], 1);
    assert_one_error_line(&r, &["not trusted"]);

    // Reading commands need the key; with it they read.
    let r = check(["cat", p(&enc), "u8"], 2);
    assert_one_error_line(&r, &["no key given matches", "\"team\""]);
    check(["cat", p(&enc), "u8", "--key", p(&team)], 0);
    // convert refuses to write plaintext; decrypt does, byte-identical to the source.
    let r = check(["convert", p(&enc), p(&dir.path("x.dt")), "--key", p(&team)], 2);
    assert_one_error_line(&r, &["decrypt"]);
    let out = dir.path("out.safetensors");
    check(["decrypt", p(&enc), p(&out), "--key", p(&team)], 0);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(), "decrypted file differs from its source");
    // meta does not rewrite (and so drop) encryption.
    let r = check(["meta", p(&enc), "--set", "a=b", "--key", p(&team)], 2);
    assert_one_error_line(&r, &["encrypted or signed"]);
}

#[test]
fn passphrase_and_wrong_keys() {
    let dir = Scratch::new("crypt-passphrase");
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let enc = dir.path("enc.dt");
    let run = |args: &[&str], code: i32| {
        let mut c = crate::command();
        c.args(args).env("PASS", "correct horse").env("BAD", "wrong horse");
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    run(&["encrypt", p(&src), p(&enc), "--to-passphrase-env", "PASS", "--cipher", "chacha20-poly1305"], 0);
    run(&["verify", p(&enc), "--passphrase-env", "PASS", "--allow-missing"], 0);
    let err = run(&["verify", p(&enc), "--passphrase-env", "BAD", "--allow-missing"], 1);
    assert!(err.contains("cannot decrypt the data key"), "{err}");
    // A flipped ciphertext byte: exit 1, naming the tensor and chunk.
    let mut bytes = std::fs::read(&enc).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 1;
    std::fs::write(&enc, &bytes).unwrap();
    let err = run(&["verify", p(&enc), "--passphrase-env", "PASS", "--allow-missing"], 1);
    assert!(err.contains("chunk 0"), "{err}");
}

#[test]
fn sign_adds_signatures_and_needs_digests() {
    let dir = Scratch::new("crypt-sign");
    keygen(&dir, "ed25519", "a", true);
    keygen(&dir, "ed25519", "b", true);
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let plain = dir.path("plain.dt");
    check(["convert", p(&src), p(&plain)], 0);
    let r = check(["sign", p(&plain), "--with", p(&dir.path("a.jwk"))], 2);
    assert_one_error_line(&r, &["digests"]);
    let sums = dir.path("sums.dt");
    check(["convert", p(&src), p(&sums), "--checksum"], 0);
    check(["sign", p(&sums), "--with", p(&dir.path("a.jwk"))], 0);
    check(["sign", p(&sums), "--with", p(&dir.path("b.jwk"))], 0);
    let v = json(["verify", p(&sums), "--signer", p(&dir.path("a.pub.jwk"))], 0);
    assert_eq!(v["signers"].as_array().unwrap().len(), 2);
    check(["verify", p(&sums), "--signer", p(&dir.path("b.pub.jwk"))], 0);
    let r = check(["verify", p(&plain), "--require-signature", "--allow-missing"], 1);
    assert_one_error_line(&r, &["not signed"]);
}

#[test]
fn cryptotensors_output_round_trips() {
    let dir = Scratch::new("crypt-ct");
    keygen(&dir, "symmetric", "master", false);
    keygen(&dir, "ed25519", "signer", true);
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let (master, signer) = (dir.path("master.jwk"), dir.path("signer.jwk"));
    for version in ["1", "2"] {
        let ct = dir.path(&format!("ct{version}.safetensors"));
        let args = [
            "encrypt",
            p(&src),
            p(&ct),
            "--format",
            "cryptotensors",
            "--ct-version",
            version,
            "--to",
            p(&master),
            "--sign",
            p(&signer),
        ];
        check(args, 0);
        let v = json(["inspect", p(&ct)], 0);
        assert_eq!(v["format"], "safetensors");
        assert_eq!(v["flags"]["cryptotensors"], true);
        let both = ["--key", p(&master), "--key", p(&signer)];
        let v = json(["verify", p(&ct), "--allow-missing", both[0], both[1], both[2], both[3]], 0);
        assert_eq!(v["checked"]["tags"], "ok");
        let out = dir.path(&format!("plain{version}.safetensors"));
        check(["decrypt", p(&ct), p(&out), both[0], both[1], both[2], both[3]], 0);
        assert!(std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(), "decrypted file differs from its source");
    }
    // One master key, one signer: cryptotensors' model.
    let r =
        check(["encrypt", p(&src), p(&dir.path("x.safetensors")), "--format", "cryptotensors", "--to", p(&master)], 2);
    assert_one_error_line(&r, &["--sign"]);
}

#[test]
fn sealed_headers_from_the_command_line() {
    let dir = Scratch::new("crypt-sealed");
    keygen(&dir, "symmetric", "team", false);
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let enc = dir.path("sealed.dt");
    let team = dir.path("team.jwk");
    check(["encrypt", p(&src), p(&enc), "--to", p(&team), "--seal-header"], 0);
    let v = json(["inspect", p(&enc)], 0);
    assert_eq!(v["flags"]["sealed"], true);
    assert_eq!(v["tensors"].as_array().unwrap().len(), 0);
    let v = json(["inspect", p(&enc), "--key", p(&team)], 0);
    assert_eq!(v["tensors"].as_array().unwrap().len(), 18);
    let out = dir.path("out.safetensors");
    check(["decrypt", p(&enc), p(&out), "--key", p(&team)], 0);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap(), "decrypted file differs from its source");
}

#[test]
fn keygen_never_replaces_a_key() {
    let dir = Scratch::new("crypt-keygen");
    let (secret, public) = (dir.path("k.jwk"), dir.path("k.pub.jwk"));
    // The same file for both halves: refused before anything is written.
    let r = check(["keygen", "--type", "x25519", "--out", p(&secret), "--public-out", p(&secret)], 2);
    assert_one_error_line(&r, &["both name", "k.jwk"]);
    std::fs::create_dir(dir.path("sub")).unwrap();
    let same = dir.path("sub/../k.jwk");
    let r = check(["keygen", "--type", "ed25519", "--out", p(&secret), "--public-out", p(&same)], 2);
    assert_one_error_line(&r, &["both name"]);
    assert!(!secret.exists());

    // An existing public key file is kept, and the new secret is not left behind alone.
    std::fs::write(&public, "published\n").unwrap();
    let r = check(["keygen", "--type", "x25519", "--out", p(&secret), "--public-out", p(&public)], 2);
    assert_one_error_line(&r, &["k.pub.jwk exists already", "was not kept"]);
    assert_eq!(std::fs::read_to_string(&public).unwrap(), "published\n");
    assert!(!secret.exists(), "a secret key without its public half stayed behind");
    // Nor is a secret key file replaced, nor a symlink followed.
    std::fs::write(&secret, "old secret\n").unwrap();
    check(["keygen", "--type", "symmetric", "--out", p(&secret)], 2);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "old secret\n");
    #[cfg(unix)]
    {
        let link = dir.path("link.jwk");
        std::os::unix::fs::symlink(dir.path("target.jwk"), &link).unwrap();
        check(["keygen", "--type", "symmetric", "--out", p(&link)], 2);
        assert!(!dir.path("target.jwk").exists(), "keygen wrote through a dangling symlink");
    }
    // No temp files anywhere.
    let names = dir.entries();
    assert!(names.iter().all(|n| !n.contains("tmp")), "temp files left: {names:?}");

    // And a good run writes both halves, the public one readable by others.
    std::fs::remove_file(&public).unwrap();
    std::fs::remove_file(&secret).unwrap();
    check(["keygen", "--type", "x25519", "--kid", "k", "--out", p(&secret), "--public-out", p(&public)], 0);
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&secret).unwrap()).unwrap();
    let pb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&public).unwrap()).unwrap();
    assert!(s.get("d").is_some() && pb.get("d").is_none());
    assert_eq!(s["x"], pb["x"]);
}

#[test]
fn cryptotensors_files_are_described_and_verified_with_a_signer_alone() {
    let dir = Scratch::new("crypt-ct-signer");
    let base = testdata().join("cryptotensors");
    let keys = base.join("keys.json");
    let jwks: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&keys).unwrap()).unwrap();
    let mut public = jwks["keys"].as_array().unwrap().iter().find(|k| k["kty"] == "okp").unwrap().clone();
    public.as_object_mut().unwrap().remove("d");
    let signer = dir.path("signer.pub.jwk");
    std::fs::write(&signer, public.to_string()).unwrap();
    let file = base.join("v2_aes256gcm.safetensors");

    // inspect, no key: the cipher, the recipient and signer key ids, the policy.
    let v = json(["inspect", p(&file)], 0);
    assert_eq!(v["flags"]["signed"], true);
    assert_eq!(v["encryption"]["scheme"], "cryptotensors");
    assert_eq!(v["encryption"]["cipher"], "AES-256-GCM");
    assert_eq!(v["encryption"]["recipients"][0]["kid"], "enc-aes256gcm");
    assert_eq!(v["encryption"]["signer_kid"], "sign-ed25519");
    assert!(v["policy"].as_str().unwrap().contains("package model"));
    let text = check(["inspect", p(&file)], 0).stdout;
    assert!(text.contains("key id \"sign-ed25519\"") && text.contains("policy (Rego)"), "{text}");
    assert!(!text.contains("__signature__"), "{text}");

    // The signature checks with the public key alone; with the keys, every tag too.
    let r = check(["verify", p(&file), "--signer", p(&signer)], 1);
    assert_one_error_line(&r, &["signature of", "verifies", "--key"]);
    check(["verify", p(&file), "--signer", p(&signer), "--allow-missing"], 0);
    let v = json(["verify", p(&file), "--signer", p(&signer), "--key", p(&keys)], 0);
    assert_eq!(v["checked"]["tags"], "ok");
    // Another signer: exit 1, and with --json one document saying why.
    let stranger = dir.path("stranger.jwk");
    check(["keygen", "--type", "ed25519", "--out", p(&stranger)], 0);
    let v = json(["verify", p(&file), "--signer", p(&stranger)], 1);
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().unwrap().contains("sign-ed25519"), "{v}");
    // A signature required and no key to check it: said so (exit 1: a requirement failed).
    let r = check(["verify", p(&file), "--require-signature"], 1);
    assert_one_error_line(&r, &["public key", "sign-ed25519"]);

    // Tensors stored in the clear are covered by nothing the signature signs.
    let partial = base.join("v2_partial_meta_chacha20poly1305.safetensors");
    let r = check(["verify", p(&partial), "--signer", p(&signer), "--key", p(&keys)], 1);
    assert_one_error_line(&r, &["covered by nothing it signs"]);
    // With the signer alone too: which tensors are encrypted is in the header.
    let r = check(["verify", p(&partial), "--signer", p(&signer), "--allow-missing"], 1);
    assert_one_error_line(&r, &["covered by nothing it signs"]);
    let v = json(["verify", p(&partial), "--key", p(&keys), "--allow-missing"], 0);
    assert!(!v["unverified"].as_array().unwrap().is_empty(), "{v}");

    // A key that does not open the file does not keep inspect from showing it.
    let wrong = dir.path("wrong.jwk");
    check(["keygen", "--type", "symmetric", "--kid", "enc-aes256gcm", "--out", p(&wrong)], 0);
    let r = check(["inspect", p(&file), "--key", p(&wrong), "--key", p(&keys)], 0);
    assert!(r.stdout.contains("AES-256-GCM"), "{}", r.stdout);
}

#[test]
fn sharded_checkpoints_are_verified_with_the_signer_and_keys() {
    let dir = Scratch::new("crypt-sharded");
    keygen(&dir, "symmetric", "team", false);
    keygen(&dir, "ed25519", "publisher", true);
    keygen(&dir, "ed25519", "stranger", true);
    let (team, publisher) = (dir.path("team.jwk"), dir.path("publisher.jwk"));
    let mut ring = deathtensors_io::KeyRing::new();
    ring.add_jwk_file(&team).unwrap();
    ring.add_jwk_file(&publisher).unwrap();
    let options = deathtensors_io::WriteOptions {
        encryption: Some(deathtensors_io::EncryptOptions {
            cipher: deathtensors_io::format::Cipher::Aes256Gcm,
            chunk_size: 4096,
            recipients: ring.recipients(deathtensors_io::format::Argon2Params::DEFAULT),
            seal_header: true,
        }),
        signers: ring.signing_keys().iter().map(|(_, k)| k.clone()).collect(),
        ..deathtensors_io::WriteOptions::default()
    };
    let data: Vec<(deathtensors_io::format::TensorSpec, Vec<u8>)> = (0..4)
        .map(|i| {
            (
                deathtensors_io::format::TensorSpec::new(format!("t{i}"), deathtensors_io::format::Dtype::U8, [5000]),
                vec![i as u8; 5000],
            )
        })
        .collect();
    let list = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    let (index, shards) = deathtensors_io::save_sharded(dir.path("model"), list, 6000, &options).unwrap();
    assert!(shards.len() >= 2);
    let (publisher_pub, stranger_pub) = (dir.path("publisher.pub.jwk"), dir.path("stranger.pub.jwk"));
    check(["verify", p(&index), "--key", p(&team), "--signer", p(&publisher_pub)], 0);
    let r = check(["verify", p(&index), "--key", p(&team), "--signer", p(&stranger_pub)], 1);
    assert_one_error_line(&r, &["not trusted"]);
    let v = json(["verify", p(&index), "--key", p(&team), "--signer", p(&stranger_pub)], 1);
    assert_eq!(v["ok"], false);
    // Sealed shards without the key: their tensors cannot be checked.
    let r = check(["verify", p(&index)], 2);
    assert_one_error_line(&r, &["team"]);
}

#[test]
fn encrypt_refuses_what_cannot_be_a_recipient_and_odd_chunk_sizes() {
    let dir = Scratch::new("crypt-recipients");
    keygen(&dir, "symmetric", "team", false);
    keygen(&dir, "ed25519", "publisher", true);
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let out = dir.path("out.dt");
    let (team, publisher_pub) = (dir.path("team.jwk"), dir.path("publisher.pub.jwk"));
    let r = check(["encrypt", p(&src), p(&out), "--to", p(&team), "--to", p(&publisher_pub)], 2);
    assert_one_error_line(&r, &["\"publisher\"", "cannot be a recipient"]);
    let r = check(["encrypt", p(&src), p(&out), "--to", p(&team), "--chunk-size", "1000"], 2);
    assert_one_error_line(&r, &["power of two from 4096"]);
    assert!(!out.exists());
    // A malformed key variable is warned about; commands that need no key run.
    let r = crate::command().args(["ls", p(&src)]).env("CRYPTOTENSOR_KEYS", "{oops").output().unwrap();
    assert!(r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("CRYPTOTENSOR_KEYS"));
}

#[test]
fn a_policy_is_evaluated_against_the_policy_input() {
    let dir = Scratch::new("crypt-policy");
    keygen(&dir, "symmetric", "team", false);
    let team = dir.path("team.jwk");
    let mut ring = deathtensors_io::KeyRing::new();
    ring.add_jwk_file(&team).unwrap();
    let rego = "package model\nimport rego.v1\ndefault allow := false\nallow if input.user == \"alice\"\n";
    let mut metadata = deathtensors_io::format::Metadata::new();
    metadata.insert("__policy__".into(), rego.into());
    let options = deathtensors_io::WriteOptions {
        metadata: Some(metadata),
        encryption: Some(deathtensors_io::EncryptOptions::new(
            ring.encrypt_to(deathtensors_io::format::Argon2Params::DEFAULT).unwrap(),
        )),
        ..deathtensors_io::WriteOptions::default()
    };
    let file = dir.path("p.dt");
    let spec = deathtensors_io::format::TensorSpec::new("w", deathtensors_io::format::Dtype::U8, [4]);
    deathtensors_io::save(&file, vec![(spec, &[1u8, 2, 3, 4][..])], &options).unwrap();

    // A refusal is a failed check: exit 1.
    let r = check(["cat", p(&file), "w", "--key", p(&team)], 1);
    assert_one_error_line(&r, &["policy"]);
    check(["cat", p(&file), "w", "--key", p(&team), "--policy-input", r#"{"user": "alice"}"#], 0);
    let input = dir.path("input.json");
    std::fs::write(&input, r#"{"user": "bob"}"#).unwrap();
    let r = check(["cat", p(&file), "w", "--key", p(&team), "--policy-input", &format!("@{}", p(&input))], 1);
    assert_one_error_line(&r, &["policy"]);
    let r = check(["ls", p(&file), "--policy-input", "{nope"], 2);
    assert_one_error_line(&r, &["--policy-input is not JSON"]);
    // inspect shows the policy, with or without a key the policy refuses.
    let v = json(["inspect", p(&file), "--key", p(&team)], 0);
    assert_eq!(v["policy"], rego);
}

#[test]
fn keygen_writes_cryptotensors_dialect() {
    let dir = Scratch::new("crypt-keygen-ct");
    let (enc, sign, public) = (dir.path("enc.jwk"), dir.path("sign.jwk"), dir.path("sign.pub.jwk"));
    check(["keygen", "--type", "symmetric", "--kid", "enc", "--format", "cryptotensors", "--out", p(&enc)], 0);
    let args = ["keygen", "--type", "ed25519", "--kid", "sign", "--format", "cryptotensors", "--out", p(&sign)];
    check([&args[..], &["--public-out", p(&public)]].concat(), 0);
    let read = |f: &Path| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap() };
    let (e, s, pb) = (read(&enc), read(&sign), read(&public));
    assert_eq!(
        (e["kty"].as_str(), e["alg"].as_str(), e["kid"].as_str()),
        (Some("oct"), Some("aes256gcm"), Some("enc"))
    );
    assert_eq!((s["kty"].as_str(), s["alg"].as_str()), (Some("okp"), Some("ed25519")));
    assert!(s["d"].as_str().unwrap().ends_with('=') && pb.get("d").is_none(), "standard padded base64");
    // They encrypt and sign cryptotensors files here too.
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let out = dir.path("ct.safetensors");
    check(["encrypt", p(&src), p(&out), "--format", "cryptotensors", "--to", p(&enc), "--sign", p(&sign)], 0);
    check(["verify", p(&out), "--key", p(&enc), "--signer", p(&public), "--allow-missing"], 0);
    let r = check(["keygen", "--type", "x25519", "--kid", "x", "--format", "cryptotensors"], 2);
    assert_one_error_line(&r, &["no X25519"]);
}

#[test]
fn signed_inputs_encrypt_and_tampered_headers_fail_inspect() {
    let dir = Scratch::new("crypt-signed-input");
    keygen(&dir, "symmetric", "team", false);
    keygen(&dir, "ed25519", "publisher", true);
    let (team, publisher) = (dir.path("team.jwk"), dir.path("publisher.jwk"));
    // A signed plaintext file is read (its digests checked), not mapped: it encrypts.
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let signed = dir.path("signed.dt");
    check(["convert", p(&src), p(&signed), "--checksum"], 0);
    check(["sign", p(&signed), "--with", p(&publisher)], 0);
    let enc = dir.path("enc.dt");
    check(["encrypt", p(&signed), p(&enc), "--to", p(&team)], 0);
    let ct = dir.path("ct.safetensors");
    check(["encrypt", p(&signed), p(&ct), "--format", "cryptotensors", "--to", p(&team), "--sign", p(&publisher)], 0);

    // A header changed after encryption fails its MAC: inspect --key says so (exit 1).
    let mut bytes = std::fs::read(&enc).unwrap();
    let at = bytes.windows(3).position(|w| w == b"u8\"").expect("a tensor name in the header");
    bytes[at] = b'v';
    let tampered = dir.path("tampered.dt");
    std::fs::write(&tampered, &bytes).unwrap();
    let r = check(["inspect", p(&tampered), "--key", p(&team)], 1);
    assert_one_error_line(&r, &["cannot decrypt the header"]);
    // A key that is simply not the file's: shown without it.
    keygen(&dir, "symmetric", "other", false);
    check(["inspect", p(&enc), "--key", p(&dir.path("other.jwk"))], 0);
}

#[test]
fn runs_in_one_process_each_see_only_their_own_keys() {
    // `deathtensors.main([...])` from Python runs `main_with_args` again
    // in the same process: a run's keys must not leak into the next one
    // (they were first-run-wins process-wide state; issue #33).
    let dir = Scratch::new("crypt-in-process");
    keygen(&dir, "symmetric", "team", false);
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let enc = dir.path("enc.dt");
    let team = dir.path("team.jwk");
    check(["encrypt", p(&src), p(&enc), "--to", p(&team)], 0);
    let main = |args: &[&str]| deathtensors_cli::main_with_args([&["deathtensors"], args].concat());
    assert_eq!(main(&["decrypt", p(&enc), p(&dir.path("1.dt")), "--key", p(&team)]), 0);
    // No key given: the first run's must not be used.
    assert_eq!(main(&["decrypt", p(&enc), p(&dir.path("2.dt"))]), 2);
    assert!(!dir.path("2.dt").exists());
    assert_eq!(main(&["decrypt", p(&enc), p(&dir.path("3.dt")), "--key", p(&team)]), 0);
    assert_eq!(std::fs::read(dir.path("1.dt")).unwrap(), std::fs::read(dir.path("3.dt")).unwrap());
}
