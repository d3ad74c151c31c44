# Runs at install time (make install, cpack): the systemd unit, with the paths of this
# install, and the default config. Under the /usr prefix (the Debian package) the
# config is /etc/cela/config.json; under any other prefix, PREFIX/etc/cela/config.json.
# An existing config is never overwritten by make install (dpkg handles its conffile).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(CELA_SYSCONFDIR "/etc")
else()
  set(CELA_SYSCONFDIR "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(CELA_BINDIR "${CMAKE_INSTALL_PREFIX}/${CELA_BINDIR_REL}")
set(CELA_DOCDIR "${CMAKE_INSTALL_PREFIX}/${CELA_DOCDIR_REL}")
set(stage "${CELA_BINARY_DIR}/packaging")
configure_file("${CELA_SOURCE_DIR}/packaging/cela.service.in" "${stage}/cela.service" @ONLY)
file(INSTALL "${stage}/cela.service" DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
if(EXISTS "$ENV{DESTDIR}${CELA_SYSCONFDIR}/cela/config.json" AND NOT CPACK_TOPLEVEL_DIRECTORY)
  message(STATUS "Kept: $ENV{DESTDIR}${CELA_SYSCONFDIR}/cela/config.json (already there)")
else()
  file(INSTALL "${CELA_SOURCE_DIR}/packaging/config.json" DESTINATION "${CELA_SYSCONFDIR}/cela"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endif()
