// Picks the IPv4 address this rank listens on and advertises to its peers.
#pragma once

#include <string>

namespace herring {

// The IPv4 address of interface `iface` ("lo", "eth0"...). Throws Error(InvalidArgument) listing
// the interfaces that exist if it has none.
std::string InterfaceAddress(const std::string& iface);

}  // namespace herring
