//! `cidr`: IPv4 and IPv6 networks against address strings.

use super::support::{check_attributes, check_body};

#[test]
fn ipv4_networks() {
    let policy = r#"{"source_ip": [{"cidr": "10.0.0.0/24"}]}"#;
    check_attributes(
        policy,
        &[
            (&[("source_ip", "String", "10.0.0.0")], true),
            (&[("source_ip", "String", "10.0.0.1")], true),
            (&[("source_ip", "String", "10.0.0.255")], true),
            (&[("source_ip", "String", "10.0.1.0")], false),
            (&[("source_ip", "String", "11.0.0.1")], false),
            (&[("source_ip", "String", "10.0.0")], false),
            (&[("source_ip", "String", "10.0.0.1/32")], false),
            (&[("source_ip", "String", "not-an-ip")], false),
            (&[("source_ip", "String", "::ffff:10.0.0.1")], false),
            (&[("source_ip", "String", "")], false),
            (&[("source_ip", "Number", "167772161")], false),
            (
                &[(
                    "source_ip",
                    "String.Array",
                    r#"["192.168.0.1", "10.0.0.9"]"#,
                )],
                true,
            ),
            (
                &[("source_ip", "String.Array", r#"["192.168.0.1"]"#)],
                false,
            ),
            (&[], false),
        ],
    );
    check_body(
        policy,
        &[
            (r#"{"source_ip": "10.0.0.5"}"#, true),
            (r#"{"source_ip": "10.0.2.5"}"#, false),
            (r#"{"source_ip": ["1.1.1.1", "10.0.0.5"]}"#, true),
            (r#"{"source_ip": 10}"#, false),
        ],
    );
}

#[test]
fn ipv4_mask_edges() {
    check_body(
        r#"{"ip": [{"cidr": "0.0.0.0/0"}]}"#,
        &[
            (r#"{"ip": "1.2.3.4"}"#, true),
            (r#"{"ip": "255.255.255.255"}"#, true),
            (r#"{"ip": "::1"}"#, false),
        ],
    );
    check_body(
        r#"{"ip": [{"cidr": "192.168.1.7/32"}]}"#,
        &[
            (r#"{"ip": "192.168.1.7"}"#, true),
            (r#"{"ip": "192.168.1.8"}"#, false),
        ],
    );
    check_body(
        r#"{"ip": [{"cidr": "10.0.0.7/24"}]}"#,
        &[
            (r#"{"ip": "10.0.0.99"}"#, true),
            (r#"{"ip": "10.0.1.7"}"#, false),
        ],
    );
    check_body(
        r#"{"ip": [{"cidr": "172.16.0.0/12"}]}"#,
        &[
            (r#"{"ip": "172.16.0.1"}"#, true),
            (r#"{"ip": "172.31.255.255"}"#, true),
            (r#"{"ip": "172.32.0.0"}"#, false),
            (r#"{"ip": "172.15.255.255"}"#, false),
        ],
    );
}

#[test]
fn ipv6_networks() {
    let policy = r#"{"ip": [{"cidr": "2001:db8:1234:1a00::/64"}]}"#;
    check_attributes(
        policy,
        &[
            (&[("ip", "String", "2001:db8:1234:1a00::1")], true),
            (
                &[("ip", "String", "2001:db8:1234:1a00:ffff:ffff:ffff:ffff")],
                true,
            ),
            (&[("ip", "String", "2001:DB8:1234:1A00::abcd")], true),
            (&[("ip", "String", "2001:db8:1234:1a01::1")], false),
            (&[("ip", "String", "10.0.0.1")], false),
            (&[("ip", "String", "2001:db8::zz")], false),
        ],
    );
    check_body(
        r#"{"ip": [{"cidr": "::/0"}]}"#,
        &[
            (r#"{"ip": "::1"}"#, true),
            (r#"{"ip": "fe80::1"}"#, true),
            (r#"{"ip": "1.2.3.4"}"#, false),
        ],
    );
    check_body(
        r#"{"ip": [{"cidr": "::1/128"}]}"#,
        &[(r#"{"ip": "::1"}"#, true), (r#"{"ip": "::2"}"#, false)],
    );
}

#[test]
fn several_networks_are_alternatives() {
    check_body(
        r#"{"ip": [{"cidr": "10.0.0.0/8"}, {"cidr": "fd00::/8"}, "127.0.0.1"]}"#,
        &[
            (r#"{"ip": "10.9.9.9"}"#, true),
            (r#"{"ip": "fd12::1"}"#, true),
            (r#"{"ip": "127.0.0.1"}"#, true),
            (r#"{"ip": "127.0.0.2"}"#, false),
            (r#"{"ip": "fe00::1"}"#, false),
        ],
    );
}

#[test]
fn cidr_inside_a_nested_or() {
    // AWS-recorded: messages 1 and 3 pass, 2 (not an address) and 4 (outside) do not.
    let policy = r#"{"detail": {"$or": [
        {"sourceIPAddress": [{"cidr": "10.0.0.0/24"}]},
        {"sourceIPAddressV6": [{"cidr": "2001:db8:1234:1a00::/64"}]}
    ]}}"#;
    check_body(
        policy,
        &[
            (
                r#"{"id": "1", "detail": {"sourceIPAddress": "10.0.0.255"}}"#,
                true,
            ),
            (
                r#"{"id": "2", "detail": {"sourceIPAddress": "10.0.0.256"}}"#,
                false,
            ),
            (
                r#"{"id": "3", "detail": {"sourceIPAddressV6": "2001:0db8:1234:1a00:0000:0000:0000:0000"}}"#,
                true,
            ),
            (
                r#"{"id": "4", "detail": {"sourceIPAddressV6": "2001:0db8:123f:1a01:0000:0000:0000:0000"}}"#,
                false,
            ),
        ],
    );
}
