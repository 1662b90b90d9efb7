//! The masker against the encodings real tools print: each form is made by running the tool on
//! the secret with text around it, so the test follows the tools, not our idea of them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

use expect_test::expect;

use super::*;

/// A secret with characters encoders treat specially, non-ASCII included.
const SECRET: &str = "s3cr3t/V\u{e4}lue+&=x";

/// `input` through `argv`'s standard input; its standard output.
fn run(argv: &[&str], input: &[u8]) -> String {
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{argv:?}: {}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

/// Each tool's output of `before + SECRET + after`, masked, with the stream's result checked equal.
#[test]
fn tools_output_is_masked() {
    let masker = Masker::new([SECRET]).unwrap();
    // Long enough on both sides that the secret straddles line breaks in every wrapped form.
    let before = "header: the quick brown fox jumps over the lazy dog; then: ";
    let after = " :end of the record, and some trailing words";
    let input = format!("{before}{SECRET}{after}");
    let python = |code: &str| run(&["python3", "-c", code], input.as_bytes());
    let cases: Vec<(&str, String)> = vec![
        ("base64 (76 columns)", run(&["base64"], input.as_bytes())),
        ("base64 -w 64", run(&["base64", "-w", "64"], input.as_bytes())),
        ("xxd", run(&["xxd"], input.as_bytes())),
        ("xxd -p", run(&["xxd", "-p"], input.as_bytes())),
        ("od -An -tx1", run(&["od", "-An", "-tx1"], input.as_bytes())),
        ("od -tx1", run(&["od", "-tx1"], input.as_bytes())),
        ("hexdump -C", run(&["hexdump", "-C"], input.as_bytes())),
        ("percent, every byte", python("import sys; print(''.join('%%%02X' % b for b in sys.stdin.buffer.read()))")),
        (
            "percent, every byte, lower",
            python("import sys; print(''.join('%%%02x' % b for b in sys.stdin.buffer.read()))"),
        ),
        ("json, every char \\u", python("import sys; print(''.join('\\\\u%04x' % ord(c) for c in sys.stdin.read()))")),
        ("json, every char \\U", python("import sys; print(''.join('\\\\u%04X' % ord(c) for c in sys.stdin.read()))")),
        ("json.dumps", python("import json, sys; print(json.dumps(sys.stdin.read()))")),
    ];
    let mut table = String::new();
    for (name, output) in &cases {
        let masked = masker.mask(output);
        writeln!(table, "--- {name}\n{masked}").unwrap();
        // Streaming, a few bytes at a time, gives the same.
        let mut stream = masker.stream();
        let mut streamed = Vec::new();
        for chunk in output.as_bytes().chunks(7) {
            stream.push(chunk, &mut streamed);
        }
        stream.finish(&mut streamed);
        assert_eq!(String::from_utf8(streamed).unwrap(), masked, "{name}: streaming differs");
    }
    expect![[r#"
        --- base64 (76 columns)
        aGVhZGVyOiB0aGUgcXVpY2sgYnJvd24gZm94IGp1bXBzIG92ZXIgdGhlIGxhenkgZG9nOyB0aGVu
        OiB***CA6ZW5kIG9mIHRoZSByZWNvcmQsIGFuZCBzb21lIHRyYWlsaW5n
        IHdvcmRz

        --- base64 -w 64
        aGVhZGVyOiB0aGUgcXVpY2sgYnJvd24gZm94IGp1bXBzIG92ZXIgdGhlIGxhenkg
        ZG9nOyB0aGVuOiB***CA6ZW5kIG9mIHRoZSByZWNvcmQs
        IGFuZCBzb21lIHRyYWlsaW5nIHdvcmRz

        --- xxd
        00000000: 6865 6164 6572 3a20 7468 6520 7175 6963  header: the quic
        00000010: 6b20 6272 6f77 6e20 666f 7820 6a75 6d70  k brown fox jump
        00000020: 7320 6f76 6572 2074 6865 206c 617a 7920  s over the lazy 
        00000030: 646f 673b 2074 6865 6e3a 20***
        00000050: 6420 6f66 2074 6865 2072 6563 6f72 642c  d of the record,
        00000060: 2061 6e64 2073 6f6d 6520 7472 6169 6c69   and some traili
        00000070: 6e67 2077 6f72 6473                      ng words

        --- xxd -p
        6865616465723a2074686520717569636b2062726f776e20666f78206a75
        6d7073206f76657220746865206c617a7920646f673b207468656e3a20***
        65636f72642c20616e6420736f6d6520747261696c696e6720776f726473

        --- od -An -tx1
         68 65 61 64 65 72 3a 20 74 68 65 20 71 75 69 63
         6b 20 62 72 6f 77 6e 20 66 6f 78 20 6a 75 6d 70
         73 20 6f 76 65 72 20 74 68 65 20 6c 61 7a 79 20
         64 6f 67 3b 20 74 68 65 6e 3a 20 ***
         64 20 6f 66 20 74 68 65 20 72 65 63 6f 72 64 2c
         20 61 6e 64 20 73 6f 6d 65 20 74 72 61 69 6c 69
         6e 67 20 77 6f 72 64 73

        --- od -tx1
        0000000 68 65 61 64 65 72 3a 20 74 68 65 20 71 75 69 63
        0000020 6b 20 62 72 6f 77 6e 20 66 6f 78 20 6a 75 6d 70
        0000040 73 20 6f 76 65 72 20 74 68 65 20 6c 61 7a 79 20
        0000060 64 6f 67 3b 20 74 68 65 6e 3a 20 ***
        0000120 64 20 6f 66 20 74 68 65 20 72 65 63 6f 72 64 2c
        0000140 20 61 6e 64 20 73 6f 6d 65 20 74 72 61 69 6c 69
        0000160 6e 67 20 77 6f 72 64 73
        0000170

        --- hexdump -C
        00000000  68 65 61 64 65 72 3a 20  74 68 65 20 71 75 69 63  |header: the quic|
        00000010  6b 20 62 72 6f 77 6e 20  66 6f 78 20 6a 75 6d 70  |k brown fox jump|
        00000020  73 20 6f 76 65 72 20 74  68 65 20 6c 61 7a 79 20  |s over the lazy |
        00000030  64 6f 67 3b 20 74 68 65  6e 3a 20 ***
        00000050  64 20 6f 66 20 74 68 65  20 72 65 63 6f 72 64 2c  |d of the record,|
        00000060  20 61 6e 64 20 73 6f 6d  65 20 74 72 61 69 6c 69  | and some traili|
        00000070  6e 67 20 77 6f 72 64 73                           |ng words|
        00000078

        --- percent, every byte
        %68%65%61%64%65%72%3A%20%74%68%65%20%71%75%69%63%6B%20%62%72%6F%77%6E%20%66%6F%78%20%6A%75%6D%70%73%20%6F%76%65%72%20%74%68%65%20%6C%61%7A%79%20%64%6F%67%3B%20%74%68%65%6E%3A%20***%20%3A%65%6E%64%20%6F%66%20%74%68%65%20%72%65%63%6F%72%64%2C%20%61%6E%64%20%73%6F%6D%65%20%74%72%61%69%6C%69%6E%67%20%77%6F%72%64%73

        --- percent, every byte, lower
        %68%65%61%64%65%72%3a%20%74%68%65%20%71%75%69%63%6b%20%62%72%6f%77%6e%20%66%6f%78%20%6a%75%6d%70%73%20%6f%76%65%72%20%74%68%65%20%6c%61%7a%79%20%64%6f%67%3b%20%74%68%65%6e%3a%20***%20%3a%65%6e%64%20%6f%66%20%74%68%65%20%72%65%63%6f%72%64%2c%20%61%6e%64%20%73%6f%6d%65%20%74%72%61%69%6c%69%6e%67%20%77%6f%72%64%73

        --- json, every char \u
        \u0068\u0065\u0061\u0064\u0065\u0072\u003a\u0020\u0074\u0068\u0065\u0020\u0071\u0075\u0069\u0063\u006b\u0020\u0062\u0072\u006f\u0077\u006e\u0020\u0066\u006f\u0078\u0020\u006a\u0075\u006d\u0070\u0073\u0020\u006f\u0076\u0065\u0072\u0020\u0074\u0068\u0065\u0020\u006c\u0061\u007a\u0079\u0020\u0064\u006f\u0067\u003b\u0020\u0074\u0068\u0065\u006e\u003a\u0020***\u0020\u003a\u0065\u006e\u0064\u0020\u006f\u0066\u0020\u0074\u0068\u0065\u0020\u0072\u0065\u0063\u006f\u0072\u0064\u002c\u0020\u0061\u006e\u0064\u0020\u0073\u006f\u006d\u0065\u0020\u0074\u0072\u0061\u0069\u006c\u0069\u006e\u0067\u0020\u0077\u006f\u0072\u0064\u0073

        --- json, every char \U
        \u0068\u0065\u0061\u0064\u0065\u0072\u003A\u0020\u0074\u0068\u0065\u0020\u0071\u0075\u0069\u0063\u006B\u0020\u0062\u0072\u006F\u0077\u006E\u0020\u0066\u006F\u0078\u0020\u006A\u0075\u006D\u0070\u0073\u0020\u006F\u0076\u0065\u0072\u0020\u0074\u0068\u0065\u0020\u006C\u0061\u007A\u0079\u0020\u0064\u006F\u0067\u003B\u0020\u0074\u0068\u0065\u006E\u003A\u0020***\u0020\u003A\u0065\u006E\u0064\u0020\u006F\u0066\u0020\u0074\u0068\u0065\u0020\u0072\u0065\u0063\u006F\u0072\u0064\u002C\u0020\u0061\u006E\u0064\u0020\u0073\u006F\u006D\u0065\u0020\u0074\u0072\u0061\u0069\u006C\u0069\u006E\u0067\u0020\u0077\u006F\u0072\u0064\u0073

        --- json.dumps
        "header: the quick brown fox jumps over the lazy dog; then: *** :end of the record, and some trailing words"

    "#]].assert_eq(&table);
}

/// What the masker cannot catch, kept here so the documented limits stay true: transforms of the
/// secret leave it readable to whoever undoes them.
#[test]
fn transforms_are_not_masked() {
    let masker = Masker::new([SECRET]).unwrap();
    let input = format!("value: {SECRET}\n");
    let split: String = SECRET.chars().flat_map(|c| [c, '\n']).collect();
    let cases = [
        ("rot13", run(&["tr", "A-Za-z", "N-ZA-Mn-za-m"], input.as_bytes())),
        ("reversed", run(&["rev"], input.as_bytes())),
        ("split over lines", split),
    ];
    let mut table = String::new();
    for (name, output) in &cases {
        writeln!(table, "--- {name}: {}", masker.mask(output) == *output).unwrap();
    }
    expect![[r#"
        --- rot13: true
        --- reversed: true
        --- split over lines: true
    "#]]
    .assert_eq(&table);
}

/// Random secrets inside random bytes, dumped `od -An -tx1` style at a random width or base64
/// wrapped at a random width: with the line breaks and spaces taken out, the secret's hex and
/// its base64 (at the alignment it was written) are gone; a stream cut anywhere agrees.
#[test]
fn property_dumps_and_wrapped_base64_never_keep_a_secret() {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    let seed = std::cell::Cell::new(0x5eed_1234_abcd_ef01u64);
    let next = |n: usize| {
        let mut x = seed.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        seed.set(x);
        (x % n as u64) as usize
    };
    for case in 0..120 {
        let secret: Vec<u8> = (0..MIN_SECRET_LEN + next(24)).map(|_| next(256) as u8).filter(|&b| b != b'*').collect();
        if secret.len() < MIN_SECRET_LEN {
            continue;
        }
        let masker = Masker::new([&secret]).unwrap();
        // The secret at a multiple of 3 bytes, so its base64 is a fixed, checkable string.
        let before: Vec<u8> = (0..3 * next(20)).map(|_| next(256) as u8).collect();
        let after: Vec<u8> = (0..next(40)).map(|_| next(256) as u8).collect();
        let data = [&before[..], &secret, &after].concat();
        let width = 4 + next(13);
        let dump: String =
            data.chunks(width).map(|row| row.iter().map(|b| format!(" {b:02x}")).collect::<String>() + "\n").collect();
        let b64 = STANDARD.encode(&data);
        let wrap = 16 + next(65);
        let wrapped: String =
            b64.as_bytes().chunks(wrap).map(|l| String::from_utf8_lossy(l).into_owned() + "\n").collect();
        let checks = [
            (dump, secret.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            (wrapped, STANDARD.encode(&secret).trim_end_matches('=').to_string()),
        ];
        // Log lines around it, some longer than a view reads, so a stream cuts inside and
        // between lines.
        let filler = |lines: usize| -> String {
            (0..lines)
                .map(|_| {
                    (0..next(300)).map(|_| (b' ' + next(95) as u8) as char).filter(|&c| c != '*').collect::<String>()
                        + "\n"
                })
                .collect()
        };
        let (head, tail) = (filler(next(40)), filler(next(40)));
        for (output, form) in checks {
            let output = format!("{head}{output}{tail}");
            let masked = masker.mask_bytes(output.as_bytes());
            let squeezed: Vec<u8> = masked.iter().copied().filter(|b| !b.is_ascii_whitespace()).collect();
            let core = &form.as_bytes()[..form.len().saturating_sub(2)];
            assert!(
                !squeezed.windows(core.len()).any(|w| w == core),
                "case {case}: {form} survives in {}",
                String::from_utf8_lossy(&masked)
            );
            let mut stream = masker.stream();
            let mut streamed = Vec::new();
            let mut rest = output.as_bytes();
            while !rest.is_empty() {
                let n = 1 + next(rest.len().min(500));
                stream.push(&rest[..n], &mut streamed);
                rest = &rest[n..];
            }
            stream.finish(&mut streamed);
            if streamed != masked {
                let at = streamed.iter().zip(&masked).position(|(a, b)| a != b).unwrap_or(0);
                let from = at.saturating_sub(200);
                panic!(
                    "case {case}: streaming differs at {at} (secret {} bytes, width {width}):\nstream: {:?}\nwhole:  {:?}\ninput:  {:?}",
                    secret.len(),
                    String::from_utf8_lossy(&streamed[from..(at + 200).min(streamed.len())]),
                    String::from_utf8_lossy(&masked[from..(at + 200).min(masked.len())]),
                    &output[from..(at + 300).min(output.len())],
                );
            }
        }
    }
}
