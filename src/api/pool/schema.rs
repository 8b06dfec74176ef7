//! The hand-written OpenAPI schemas of the pool fields that need other than the derive gives:
//! the status counts as a plain `integer` (Go's `int`), and for spec fields bounds (`maxItems`,
//! `maxLength`), list types, descriptions without the Rust doc's markup, and the CEL rules that
//! sit on a field or on each entry of a list rather than on the spec. Each is named in a
//! `#[schemars(schema_with = ...)]` of [`super`]'s types.
use super::rules;
use super::{
    MAX_ADDITIONAL_SUBNETS, MAX_ADDRESS_ENTRIES, MAX_ADDRESS_TEXT, MAX_IP_TEXT,
    MAX_PRE_ALLOCATIONS, MAX_SUBNET_ADDRESS_ENTRIES,
};

pub(super) fn integer_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "integer" })
}

pub(super) fn prefix_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "minimum": 0,
        "maximum": 128,
        "description": "Prefix is the network prefix to use (1-32 for IPv4, 1-128 for IPv6)."
    })
}

pub(super) fn gateway_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": MAX_ADDRESS_TEXT,
        "description": "Gateway is the address of the network's gateway (optional, same family as the addresses).",
        "x-kubernetes-validations": [rules::gateway_parses()]
    })
}

pub(super) fn addresses_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::try_from(address_list(
        "Addresses is a list of IP addresses that can be assigned. This set of addresses can be non-contiguous. Each entry is a single IP, a CIDR or a first-last range; all entries are of one family and inside the subnet given by the first entry and prefix.",
        MAX_ADDRESS_ENTRIES,
    ))
    .expect("an object is a schema")
}

/// The schema of an `addresses` list, the spec's own or a subnet's: at most `max_items`
/// entries that each parse, and at least one.
fn address_list(description: &str, max_items: usize) -> serde_json::Value {
    serde_json::json!({
        "type": "array",
        "description": description,
        "maxItems": max_items,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::entry_parses()]
        },
        "x-kubernetes-validations": [rules::addresses_not_empty()]
    })
}

pub(super) fn additional_subnets_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names = rules::ADDITIONAL_SUBNET;
    schemars::json_schema!({
        "type": "array",
        "description": "AdditionalSubnets are more subnets the pool hands addresses out of, each with its own prefix and gateway, beside the pool's own subnet (addresses, prefix, gateway). Addresses are handed out from the pool's own subnet first, then from these in the order written. The subnets of a pool must not overlap.",
        "maxItems": MAX_ADDITIONAL_SUBNETS,
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "required": ["addresses", "prefix"],
            "properties": {
                "addresses": address_list(
                    "Addresses of the subnet that can be assigned: IPs, CIDRs or first-last ranges, of the pool's family, inside the subnet given by the first entry and prefix.",
                    MAX_SUBNET_ADDRESS_ENTRIES,
                ),
                "prefix": {
                    "type": "integer",
                    "format": "int32",
                    "minimum": 1,
                    "maximum": 128,
                    "description": "Prefix is the subnet's network prefix (1-32 for IPv4, 1-128 for IPv6), carried by every IPAddress handed out of it."
                },
                "gateway": {
                    "type": "string",
                    "maxLength": MAX_ADDRESS_TEXT,
                    "description": "Gateway of the subnet (optional): an address inside it, carried by every IPAddress handed out of it and never handed out.",
                    "x-kubernetes-validations": [rules::gateway_parses()]
                }
            },
            "x-kubernetes-validations": [
                rules::to_json(rules::single_family()),
                rules::to_json(rules::ipv4_prefix()),
                rules::to_json(rules::within_subnet(names)),
                rules::to_json(rules::gateway_family(names)),
                rules::to_json(rules::gateway_inside(names))
            ]
        }
    })
}

pub(super) fn excluded_addresses_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "ExcludedAddresses is a list of IP addresses, CIDRs or first-last ranges which will be excluded from the set of assignable IP addresses.",
        "maxItems": MAX_ADDRESS_ENTRIES,
        "items": {
            "type": "string",
            "maxLength": MAX_ADDRESS_TEXT,
            "x-kubernetes-validations": [rules::entry_parses()]
        }
    })
}

pub(super) fn pre_allocations_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "PreAllocations names claims that get a given address: the claim named by an entry gets exactly that address, and no other claim gets it while the entry exists. Keyed by claimNamespace and claimName.",
        "maxItems": MAX_PRE_ALLOCATIONS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["claimNamespace", "claimName"],
        "items": {
            "type": "object",
            "required": ["claimName", "address"],
            "properties": {
                "claimNamespace": {
                    "type": "string",
                    "default": "",
                    "maxLength": 63,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
                    "description": "Namespace of the claim: required on a GlobalInClusterIPPool, left out on an InClusterIPPool, whose claims are in its own namespace."
                },
                "claimName": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 253,
                    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                    "description": "Name of the IPAddressClaim."
                },
                "address": {
                    "type": "string",
                    "maxLength": MAX_IP_TEXT,
                    "description": "The address the claim gets: one IP of the pool's family, among the addresses the pool hands out.",
                    "x-kubernetes-validations": [rules::pre_allocation_address_parses()]
                }
            }
        },
    })
}

pub(crate) fn parent_pool_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "ParentPool names a prefix pool this pool carves from: inpool claims subPrefixes sub-prefixes of it, and each one realised is one more subnet of an IP pool, or one more prefix of a prefix pool.",
        "required": ["poolRef"],
        "properties": {
            "poolRef": {
                "type": "object",
                "description": "PoolRef names the parent: a GlobalInClusterPrefixPool, or an InClusterPrefixPool of the namespace of the claims on it (this pool's, or claimNamespace).",
                "required": ["apiGroup", "kind", "name"],
                "properties": {
                    "apiGroup": {
                        "type": "string",
                        "enum": ["ipam.cluster.x-k8s.io"],
                        "description": "apiGroup of the parent: ipam.cluster.x-k8s.io."
                    },
                    "kind": {
                        "type": "string",
                        "enum": ["InClusterPrefixPool", "GlobalInClusterPrefixPool"],
                        "description": "kind of the parent: InClusterPrefixPool or GlobalInClusterPrefixPool."
                    },
                    "name": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 253,
                        "pattern": crate::api::capi::DNS1123_SUBDOMAIN_PATTERN,
                        "description": "name of the parent."
                    }
                }
            },
            "subPrefixes": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "maximum": MAX_ADDITIONAL_SUBNETS,
                "default": 1,
                "description": "SubPrefixes is how many sub-prefixes of the parent (each of its allocationPrefixLength) the pool holds, each one subnet or prefix of it: 1 to 16, 1 when left out."
            },
            "claimNamespace": {
                "type": "string",
                "maxLength": 63,
                "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
                "description": "ClaimNamespace is where inpool creates the claims on the parent: required on a cluster-scoped pool, left out on a namespaced one (its own namespace)."
            }
        }
    })
}
