//! The CEL rules of the pool CRDs, built as text so that each sub-expression is written once.
//!
//! Notation in the comments: an *entry* is one string of `addresses` / `excludedAddresses`;
//! `first` is `spec.addresses[0]`.
//!
//! | where | rule |
//! |---|---|
//! | `addresses` | at least one entry |
//! | each entry | an IP, a CIDR, or `first-last` with two IPs of one family and `first <= last` |
//! | `prefix` | `>= 1` (schema: `0..=128`, as the reference's) |
//! | `gateway` | empty (unset) or an IP |
//! | spec | all `addresses` entries of `first`'s family |
//! | spec | `prefix <= 32` when `first` is IPv4 |
//! | spec | every `addresses` entry inside the subnet of `first`'s address and `prefix` |
//! | spec | `gateway` of `first`'s family |
//! | spec | all `excludedAddresses` entries of `first`'s family |
//! | each `preAllocations[].address` | one IP (no CIDR, no range) |
//! | spec | every `preAllocations[].address` of `first`'s family |
//! | each `preAllocations` entry (per kind, added in [`crate::api::crds`]) | `claimNamespace` empty on an `InClusterIPPool`, set on a `GlobalInClusterIPPool` |
//! | each `additionalSubnets` entry | the rules of the spec's own `addresses`, `prefix` and `gateway` above, on the entry's (`prefix` is bounded `1..=128` by the schema) |
//! | each `additionalSubnets` entry | `gateway` inside the subnet of the entry's first address and `prefix` |
//! | spec | the first address of every `additionalSubnets` entry of `first`'s family |
//! | spec | no two subnets overlap (the spec's own, every `additionalSubnets` entry's) |
//! | spec | `addresses` and `prefix` set unless `parentPool` is (the prefix pools' `prefixes` too) |
//! | `spec.parentPool` (per kind, added in [`crate::api::crds`]) | `claimNamespace` left out on a namespaced pool, set on a cluster-scoped one (the prefix pools' too) |
//!
//! Cross-field rules are written `!precondition || check`, so that a value another rule already
//! reports (an unparsable entry, a missing first entry) never makes them fail or error: each
//! mistake is reported once, by the rule about it.
//!
//! The API server refuses a CRD whose rules' *estimated* cost is too high, and it cannot bound
//! the length of some values: `string(int)`, `string(ip)` and `join()` results count as
//! unbounded. The rules therefore never use them: numbers are shown through a literal list of
//! their texts, values are bound to names with `[value].all(name, ...)` /
//! `[value].map(name, ...)[0]` (CEL here has no `cel.bind`), and addresses are compared through
//! fixed-width keys built from bounded substrings.
use kube::core::{Message, Reason, Rule};
use serde_json::Value;

use crate::api::PoolKind;

pub(crate) fn rule(rule: String, message_expression: String, field_path: Option<&str>) -> Rule {
    let mut r = Rule::new(rule).message(Message::Expression(message_expression));
    if let Some(p) = field_path {
        r = r.field_path(p);
    }
    r
}

pub(crate) fn to_json(r: Rule) -> Value {
    serde_json::to_value(r).expect("rule serialises")
}

/// The first entry of `addresses` (only used behind `size(self.addresses) > 0`).
const FIRST: &str = "self.addresses[0]";

/// How the messages of the rules about one subnet (`self` is an object with `addresses`,
/// `prefix` and `gateway`) name its other fields: the spec's own, or an entry of
/// `additionalSubnets`. A message never starts with the field it is about: the API server's
/// error already begins with that field's path (the rule's place, or its `fieldPath`), entry
/// indices included.
#[derive(Clone, Copy, Debug)]
pub struct SubnetNames {
    pub addresses: &'static str,
    pub prefix: &'static str,
}

/// The spec's own subnet.
pub const SPEC: SubnetNames = SubnetNames {
    addresses: "spec.addresses",
    prefix: "spec.prefix",
};

/// An entry of `spec.additionalSubnets`.
pub const ADDITIONAL_SUBNET: SubnetNames = SubnetNames {
    addresses: "spec.additionalSubnets.addresses",
    prefix: "spec.additionalSubnets.prefix",
};

/// `['0', '1', ..., '128']`: the text of a prefix length, by index.
pub(crate) fn numbers() -> String {
    let items: Vec<String> = (0..=128).map(|i| format!("'{i}'")).collect();
    format!("[{}]", items.join(", "))
}

/// Text of `self.prefix` (any value the schema allows).
fn prefix_text() -> String {
    format!(
        "(self.prefix >= 0 && self.prefix <= 128 ? {}[self.prefix] : 'out of range')",
        numbers()
    )
}

/// Cheap "this entry has a shape we can take apart" test: an IP, a CIDR, or two IPs around
/// one `-`. Used to guard cross-field rules.
pub fn entry_shaped(e: &str) -> String {
    format!(
        "(isIP({e}) || isCIDR({e}) || (size({e}.split('-')) == 2 && isIP({e}.split('-')[0]) && isIP({e}.split('-')[1])))"
    )
}

/// Family (4 or 6) of an [`entry_shaped`] entry: of the CIDR's address, else of the (first)
/// IP.
pub fn entry_family(e: &str) -> String {
    format!("(isCIDR({e}) ? cidr({e}).ip().family() : ip({e}.split('-')[0]).family())")
}

/// `'4'` or `'6'` for a family expression.
fn family_text(f: &str) -> String {
    format!("({f} == 4 ? '4' : '6')")
}

/// Text of the first address of an [`entry_shaped`] entry (the IP, the CIDR's address, or
/// the range's first address).
fn entry_address(e: &str) -> String {
    format!("{e}.split('/')[0].split('-')[0]")
}

/// Integer value of a valid IPv4 address text `a` (a CEL name).
fn ipv4_value(a: &str) -> String {
    format!(
        "(int({a}.split('.')[0]) * 16777216 + int({a}.split('.')[1]) * 65536 + int({a}.split('.')[2]) * 256 + int({a}.split('.')[3]))"
    )
}

/// The 32 lower-case hex digits of a valid IPv6 address text `a` (a CEL name), so that
/// string order is numeric order:
/// 1. an embedded IPv4 tail (`64:ff9b::192.0.2.1`) becomes two hex groups, and the text is
///    lower-cased (`n`);
/// 2. `::` is replaced by the missing zero groups (`x`);
/// 3. each of the 8 groups (`g0`..`g7`) is zero-padded to 4 digits and the groups are
///    concatenated.
fn ipv6_key(a: &str) -> String {
    let hex = |n: String| format!("'0123456789abcdef'.substring({n}, {n} + 1)");
    let mut tail = format!("{a}.substring(0, {a}.lastIndexOf(':') + 1)");
    for i in 0..4 {
        if i == 2 {
            tail.push_str(" + ':'");
        }
        tail.push_str(&format!(
            " + {} + {}",
            hex(format!("o{i} / 16")),
            hex(format!("o{i} % 16"))
        ));
    }
    for i in (0..4).rev() {
        tail = format!("[int(q.split('.')[{i}])].map(o{i}, {tail})[0]");
    }
    let normalized = format!(
        "({a}.contains('.') ? [{a}.substring({a}.lastIndexOf(':') + 1)].map(q, {tail})[0] : {a}).lowerAscii()"
    );
    // Groups written in `n` when it contains `::`: the empty fields of split(':') are the
    // `::` itself plus one more at either end.
    let written =
        "(size(n.split(':')) - 1 - (n.startsWith('::') ? 1 : 0) - (n.endsWith('::') ? 1 : 0))";
    let expanded = format!(
        "(n.contains('::') ? n.substring(0, n.indexOf('::')) + (n.startsWith('::') ? '' : ':') + '0:0:0:0:0:0:0:0'.substring(0, 2 * (8 - {written}) - 1) + (n.endsWith('::') ? '' : ':') + n.substring(n.indexOf('::') + 2) : n)"
    );
    let mut key = (0..8)
        .map(|i| format!("'000'.substring(size(g{i}) - 1) + g{i}"))
        .collect::<Vec<_>>()
        .join(" + ");
    for i in (0..8).rev() {
        key = format!("[x.split(':')[{i}]].map(g{i}, {key})[0]");
    }
    format!("[{normalized}].map(n, [{expanded}].map(x, {key})[0])[0]")
}

/// `a <= b` for two valid IPs `a`, `b` (CEL names) of one family.
fn ip_le(a: &str, b: &str) -> String {
    format!(
        "(ip({a}).family() == 4 ? {va} <= {vb} : {ka} <= {kb})",
        va = ipv4_value(a),
        vb = ipv4_value(b),
        ka = ipv6_key(a),
        kb = ipv6_key(b),
    )
}

/// The full per-entry rule (self is the entry): what the reference parses with
/// `netip.ParseAddr`, `netip.ParsePrefix` or `netipx.ParseIPRange` (split at the dash, no
/// spaces, both ends of one family, first <= last).
pub fn entry_rule() -> String {
    format!(
        "isIP(self) || isCIDR(self) || (size(self.split('-')) == 2 && [self.split('-')[0]].all(a, [self.split('-')[1]].all(b, isIP(a) && isIP(b) && ip(a).family() == ip(b).family() && {le})))",
        le = ip_le("a", "b")
    )
}

/// Rule on each entry of `addresses` or `excludedAddresses`.
pub fn entry_parses() -> Value {
    to_json(rule(
        entry_rule(),
        "'must be an IP address, a CIDR or a first-last range (two addresses of one family, first <= last, no spaces)'".into(),
        None,
    ))
}

/// Rule on `addresses` itself: not empty.
pub fn addresses_not_empty() -> Value {
    to_json(rule(
        "size(self) > 0".into(),
        "'at least one address, CIDR or first-last range is required'".into(),
        None,
    ))
}

/// Rule on `gateway`: empty (unset, as in the reference) or an IP.
pub fn gateway_parses() -> Value {
    to_json(rule(
        "self == '' || isIP(self)".into(),
        "'must be an IP address'".into(),
        None,
    ))
}

/// Rule on `spec.prefix`: at least 1 (the schema bounds it to 0..=128 as the reference's).
pub fn prefix_positive() -> Rule {
    rule(
        "self >= 1".into(),
        "'must be at least 1: use 1-32 for IPv4, 1-128 for IPv6'".into(),
        None,
    )
}

/// Spec rules: `addresses` and `prefix` are required unless `parentPool` is set (the schema
/// cannot say "unless"), each reported at its field as a missing value.
pub fn required_unless_parent(field: &str) -> Rule {
    Rule::new(format!("has(self.parentPool) || has(self.{field})"))
        .message(Message::Expression(
            "'required unless spec.parentPool is set'".into(),
        ))
        .reason(Reason::FieldValueRequired)
        .field_path(format!(".{field}"))
}

/// Spec rule: a `gateway` belongs to `addresses`; the subnets carved from `parentPool` get theirs
/// by rule.
pub fn gateway_needs_addresses() -> Rule {
    rule(
        "!has(self.gateway) || self.gateway == '' || has(self.addresses)".into(),
        "'is the gateway of spec.addresses, which is left out: the subnets carved from spec.parentPool get theirs by rule (the first address after the network address)'".into(),
        Some(".gateway"),
    )
}

/// Rule on `spec.parentPool` per kind (added in [`crate::api::crds`]): `claimNamespace` left out
/// on a namespaced pool (its claims are in its own namespace), required on a cluster-scoped one.
pub fn parent_claim_namespace(kind: PoolKind) -> Value {
    let name = kind.name();
    let (text, message) = if kind.is_namespaced() {
        (
            "!has(self.claimNamespace) || self.claimNamespace == ''",
            format!(
                "'claimNamespace ' + self.claimNamespace + ' is set: an {name} claims on its parent in its own namespace; leave claimNamespace out'"
            ),
        )
    } else {
        (
            "has(self.claimNamespace) && self.claimNamespace != ''",
            format!(
                "'claimNamespace is required on a {name}: the namespace where inpool creates the claims on the parent'"
            ),
        )
    };
    to_json(rule(text.into(), message, None))
}

/// The rule and message for the namespaced kind, or those for the global kind.
fn by_kind(namespaced: bool, namespaced_rule: (&str, &str), global_rule: (&str, &str)) -> Value {
    let (text, message) = if namespaced {
        namespaced_rule
    } else {
        global_rule
    };
    to_json(rule(text.into(), message.into(), None))
}

/// Subnet rule: every entry of `addresses` has the family of the first.
pub fn single_family() -> Rule {
    let f = entry_family(FIRST);
    rule(
        format!(
            "!has(self.addresses) || size(self.addresses) == 0 || !{g} || self.addresses.all(e, !{ge} || {fe} == {f})",
            g = entry_shaped(FIRST),
            ge = entry_shaped("e"),
            fe = entry_family("e"),
        ),
        format!(
            "self.addresses.filter(e, {ge} && {fe} != {f})[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but the first entry ' + {FIRST} + ' is IPv' + {ft} + ': a pool holds addresses of one family'",
            ge = entry_shaped("e"),
            fe = entry_family("e"),
            ft = family_text(&f),
        ),
        Some(".addresses"),
    )
}

/// Subnet rule: `prefix <= 32` for an IPv4 pool.
pub fn ipv4_prefix() -> Rule {
    rule(
        format!(
            "!has(self.addresses) || size(self.addresses) == 0 || !has(self.prefix) || !{g} || {f} == 6 || self.prefix <= 32",
            g = entry_shaped(FIRST),
            f = entry_family(FIRST)
        ),
        format!(
            "{p} + ' is longer than 32, the longest prefix of an IPv4 pool'",
            p = prefix_text()
        ),
        Some(".prefix"),
    )
}

/// The subnet of the first entry's (first) address and `prefix` (only where the prefix fits
/// the family).
fn subnet_cidr() -> String {
    format!(
        "cidr({a} + '/' + {n}[self.prefix])",
        a = entry_address(FIRST),
        n = numbers()
    )
}

/// Whether entry `e` lies inside the subnet `s` (CEL names).
fn inside(e: &str, s: &str) -> String {
    format!(
        "(isCIDR({e}) ? {s}.containsCIDR(cidr({e})) : {s}.containsIP({e}.split('-')[0]) && {s}.containsIP({e}.split('-')[size({e}.split('-')) - 1]))"
    )
}

/// True when the subnet of the first entry's address and `prefix` is not defined yet: some
/// entry has no shape or another family, or the prefix does not fit (other rules report
/// those).
fn subnet_undefined() -> String {
    let f = entry_family(FIRST);
    format!(
        "!has(self.addresses) || size(self.addresses) == 0 || !self.addresses.all(e, {ge}) || !self.addresses.all(e, {fe} == {f}) || !has(self.prefix) || self.prefix < 1 || self.prefix > ({f} == 4 ? 32 : 128)",
        ge = entry_shaped("e"),
        fe = entry_family("e"),
    )
}

/// The end of a subnet rule's message, after the address it refuses (CEL): the subnet, of the
/// first entry's address and `prefix`, that the address is not inside.
fn outside_the_subnet(names: SubnetNames) -> String {
    format!(
        "' is not inside the /' + {p} + ' subnet ({prefix}) of ' + {a} + ', the first address of {n}'",
        n = names.addresses,
        prefix = names.prefix,
        p = prefix_text(),
        a = entry_address(FIRST),
    )
}

/// Subnet rule: every entry of `addresses` lies inside the subnet of the first entry's
/// address and `prefix`.
pub fn within_subnet(names: SubnetNames) -> Rule {
    rule(
        format!(
            "{u} || [{s}].all(s, self.addresses.all(e, {ie}))",
            u = subnet_undefined(),
            s = subnet_cidr(),
            ie = inside("e", "s"),
        ),
        format!(
            "[{s}].map(s, self.addresses.filter(e, !{ie})[0] + {outside})[0]",
            s = subnet_cidr(),
            ie = inside("e", "s"),
            outside = outside_the_subnet(names),
        ),
        Some(".addresses"),
    )
}

/// Subnet rule for `additionalSubnets` entries: the gateway lies inside the subnet of the
/// first entry's address and `prefix` (the spec's own gateway need not, as in the reference).
pub fn gateway_inside(names: SubnetNames) -> Rule {
    let f = entry_family(FIRST);
    rule(
        format!(
            "!has(self.gateway) || !isIP(self.gateway) || {u} || ip(self.gateway).family() != {f} || [{s}].all(s, s.containsIP(self.gateway))",
            u = subnet_undefined(),
            s = subnet_cidr(),
        ),
        format!(
            "self.gateway + {outside}",
            outside = outside_the_subnet(names),
        ),
        Some(".gateway"),
    )
}

/// Subnet rule: the gateway has the family of the addresses.
pub fn gateway_family(names: SubnetNames) -> Rule {
    let f = entry_family(FIRST);
    rule(
        format!(
            "!has(self.gateway) || !isIP(self.gateway) || !has(self.addresses) || size(self.addresses) == 0 || !{g} || ip(self.gateway).family() == {f}",
            g = entry_shaped(FIRST)
        ),
        format!(
            "self.gateway + ' is IPv' + {gt} + ' but {a} is IPv' + {ft}",
            a = names.addresses,
            gt = family_text("ip(self.gateway).family()"),
            ft = family_text(&f),
        ),
        Some(".gateway"),
    )
}

/// Spec rule: every excluded entry has the family of the addresses.
pub fn excluded_family() -> Rule {
    let f = entry_family(FIRST);
    rule(
        format!(
            "!has(self.excludedAddresses) || !has(self.addresses) || size(self.addresses) == 0 || !{g} || self.excludedAddresses.all(x, !{gx} || {fx} == {f})",
            g = entry_shaped(FIRST),
            gx = entry_shaped("x"),
            fx = entry_family("x"),
        ),
        format!(
            "self.excludedAddresses.filter(x, {gx} && {fx} != {f})[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but spec.addresses is IPv' + {ft}",
            gx = entry_shaped("x"),
            fx = entry_family("x"),
            ft = family_text(&f),
        ),
        Some(".excludedAddresses"),
    )
}

/// Rule on each `preAllocations[].address`: one IP.
pub fn pre_allocation_address_parses() -> Value {
    to_json(rule(
        "isIP(self)".into(),
        "'must be one IP address (no CIDR or range)'".into(),
        None,
    ))
}

/// Spec rule: every pre-allocated address has the family of the addresses.
pub fn pre_allocation_family() -> Rule {
    let f = entry_family(FIRST);
    rule(
        format!(
            "!has(self.preAllocations) || !has(self.addresses) || size(self.addresses) == 0 || !{g} || self.preAllocations.all(p, !isIP(p.address) || ip(p.address).family() == {f})",
            g = entry_shaped(FIRST),
        ),
        format!(
            "'every address must be IPv' + {ft} + ', the family of spec.addresses'",
            ft = family_text(&f),
        ),
        Some(".preAllocations"),
    )
}

/// Per-kind rule on each entry of `preAllocations`: the claims of an `InClusterIPPool` are in its own
/// namespace (`claimNamespace` left out), a `GlobalInClusterIPPool` serves every namespace
/// (`claimNamespace` required). The two kinds share one spec type, so [`crate::api::crds`]
/// adds this rule to each CRD.
pub fn pre_allocation_namespace(namespaced: bool) -> Value {
    by_kind(
        namespaced,
        (
            "self.claimNamespace == ''",
            "'claimNamespace ' + self.claimNamespace + ' is set for claim ' + self.claimName + ': an InClusterIPPool serves the claims of its own namespace only; leave claimNamespace out'",
        ),
        (
            "self.claimNamespace != ''",
            "'claimNamespace is required on a GlobalInClusterIPPool (claim ' + self.claimName + ')'",
        ),
    )
}

/// The first address of subnet `o`'s first entry, and whether the subnet of it and `o`'s
/// prefix is defined and of the family `f` of the spec's addresses (the entries themselves
/// are checked by each subnet's own rules).
fn subnet_defined(o: &str, f: &str) -> String {
    let first = format!("{o}.addresses[0]");
    format!(
        "(has({o}.addresses) && has({o}.prefix) && size({o}.addresses) > 0 && {g} && {fam} == {f} && {o}.prefix >= 1 && {o}.prefix <= ({f} == 4 ? 32 : 128))",
        g = entry_shaped(&first),
        fam = entry_family(&first),
    )
}

/// The subnet of `o`'s first entry and prefix, as a CIDR (behind [`subnet_defined`]).
fn subnet_of(o: &str) -> String {
    format!(
        "cidr({a} + '/' + {n}[{o}.prefix])",
        a = entry_address(&format!("{o}.addresses[0]")),
        n = numbers(),
    )
}

/// Spec rule: the first entry of every `additionalSubnets` entry has the family of
/// `spec.addresses` (each subnet's own rule checks its other entries against its first).
pub fn additional_subnets_family() -> Rule {
    let f = entry_family(FIRST);
    let other_family = |s: &str| {
        let first = format!("{s}.addresses[0]");
        format!(
            "(size({s}.addresses) > 0 && {g} && {fam} != {f})",
            g = entry_shaped(&first),
            fam = entry_family(&first),
        )
    };
    rule(
        format!(
            "!has(self.additionalSubnets) || !has(self.addresses) || size(self.addresses) == 0 || !{g} || !self.additionalSubnets.exists(s, {o})",
            g = entry_shaped(FIRST),
            o = other_family("s"),
        ),
        format!(
            "self.additionalSubnets.filter(s, {o})[0].addresses[0] + ' is IPv' + ({f} == 4 ? '6' : '4') + ' but spec.addresses is IPv' + {ft} + ': a pool holds addresses of one family'",
            o = other_family("s"),
            ft = family_text(&f),
        ),
        Some(".additionalSubnets"),
    )
}

/// Spec rule: the subnets of a pool (the spec's own, and every `additionalSubnets` entry's)
/// do not overlap, so that every address has one prefix and one gateway. Two CIDRs overlap
/// exactly when one contains the other; each subnet overlaps itself, so "no other" is
/// "exactly one" among the entries.
pub fn additional_subnets_disjoint() -> Rule {
    let f = entry_family(FIRST);
    let overlap = |a: &str, b: &str| format!("({a}.containsCIDR({b}) || {b}.containsCIDR({a}))");
    let clear = format!(
        "(!{ds} || [{cs}].all(c, (!{dself} || [{cself}].all(o, !{oo})) && self.additionalSubnets.exists_one(t, {dt} && [{ct}].all(d, {od}))))",
        ds = subnet_defined("s", &f),
        cs = subnet_of("s"),
        dself = subnet_defined("self", &f),
        cself = subnet_of("self"),
        oo = overlap("c", "o"),
        dt = subnet_defined("t", &f),
        ct = subnet_of("t"),
        od = overlap("c", "d"),
    );
    rule(
        format!(
            "!has(self.additionalSubnets) || !has(self.addresses) || size(self.addresses) == 0 || !{g} || self.additionalSubnets.all(s, {clear})",
            g = entry_shaped(FIRST),
        ),
        format!(
            "[self.additionalSubnets.filter(s, !{clear})[0]].map(s, 'the /' + {n}[s.prefix] + ' subnet of ' + {a} + ' overlaps the subnet of spec.addresses or of another entry: the subnets of one pool must not overlap, so that each address has one prefix and one gateway')[0]",
            n = numbers(),
            a = entry_address("s.addresses[0]"),
        ),
        Some(".additionalSubnets"),
    )
}
