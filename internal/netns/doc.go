// Package netns builds real network partitions for tests, out of Linux
// network namespaces: one namespace per node, each with a veth pair to a
// bridge that lives in a namespace of its own, and an address in
// 10.213.0.0/24 (node id i has 10.213.0.i). Nothing is added to the
// host's own namespace, so parallel runs cannot clash and the host's
// firewall never sees the traffic.
//
// Partitions are packet filters inside the node namespaces (nft, or
// iptables when nft is missing): a cut drops every packet between two
// nodes, as a dead link does, so connects time out and established
// connections stall (and resume after Heal, as TCP does). A one-way cut
// drops the packets of the connections the first node opens towards the
// second (conntrack's original direction), leaving the second node's
// connections to the first intact: TCP cannot run over a link that
// passes packets one way only, and the cluster's transport writes only
// on the connections it dials, so this is the one-way cut it sees.
//
// It is for Linux only (elsewhere the package is empty). It needs root and the ip command (iproute2), plus nft or iptables;
// Setup skips the test, with the reason, when something is missing, or
// fails it when JUNCTION_REQUIRE_NETNS=1 (as CI sets it).
// Namespaces are named jn<pid>-<random>-…: Close removes them, and New
// first removes those left by processes that no longer exist (a test
// binary killed mid-run).
package netns
