// Boost.URL has no Debian library package in 1.81: its sources are compiled here, once,
// as the library documents for header-only use. No other target may include
// <boost/url/src.hpp> (link cela_api instead), or its symbols would be defined twice.
#include <boost/url/src.hpp>
