# Self-contained installs: each installed binary of this project (aoti_runner, the op
# libraries, later the Triton backend in backends/aoti/) gets a RUNPATH relative to
# itself, and every shared library it needs is copied into one lib folder, except the
# system's own base: glibc's pieces, libstdc++ and libgcc_s.
#
#   aoti_deploy_install_runtime(TARGET <target> DESTINATION <dir>
#                                 [LIBRARY_DESTINATION <dir>] [RUNPATH <runpath>])
#
# installs <target> to <prefix>/<dir> and its runtime dependencies to
# <prefix>/<LIBRARY_DESTINATION> (default lib) with RUNPATH $ORIGIN. <target> gets the
# RUNPATH that leads from <dir> to LIBRARY_DESTINATION ($ORIGIN/../lib for bin and lib,
# $ORIGIN when they are the same folder), derived so the two cannot drift apart, unless
# RUNPATH says otherwise. Both folders are relative to the prefix, so the tree can be
# moved as a whole.
#
# This file is read twice. At configure time CMakeLists.txt includes it and calls
# aoti_deploy_install_runtime(), which writes install rules. At install time the
# install(CODE) those rules hold includes it again and calls the _copy/_report
# functions below: file(GET_RUNTIME_DEPENDENCIES) works only at install time, and the
# install script is a separate CMake run that knows nothing of the configure-time one.
include_guard(GLOBAL)

set(_AOTI_DEPLOY_RUNTIME_SCRIPT "${CMAKE_CURRENT_LIST_FILE}")

# What may come from the machine the runtime is installed on, by soname: glibc's own
# pieces (a copy of those must match the system's ld.so, so they are never bundled),
# the C++ and GCC runtime libraries (backward compatible, present on every Linux), and
# the CUDA driver, which belongs to the GPU's kernel module (only a CUDA torch needs
# it). Everything else a binary needs, libcrypto included, is copied.
set(_AOTI_DEPLOY_SYSTEM_SONAMES
  "ld-linux[-_.a-z0-9]*\\.so(\\.[0-9]+)*"
  "(libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv|libanl|libnsl)\\.so(\\.[0-9]+)*"
  "(libstdc\\+\\+|libgcc_s)\\.so(\\.[0-9]+)*"
  "libcuda\\.so(\\.[0-9]+)*")
# PRE_EXCLUDE: not even resolved (matched against the NEEDED name). POST_EXCLUDE: the
# same names once resolved to a full path, should a NEEDED entry name one by path.
set(_AOTI_DEPLOY_SYSTEM_PRE_EXCLUDE "")
set(_AOTI_DEPLOY_SYSTEM_POST_EXCLUDE "")
foreach(_soname IN LISTS _AOTI_DEPLOY_SYSTEM_SONAMES)
  list(APPEND _AOTI_DEPLOY_SYSTEM_PRE_EXCLUDE "^${_soname}$")
  list(APPEND _AOTI_DEPLOY_SYSTEM_POST_EXCLUDE "/${_soname}$")
endforeach()
unset(_soname)

# --- configure time ---------------------------------------------------------------
function(aoti_deploy_install_runtime)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "TARGET;DESTINATION;RUNPATH;LIBRARY_DESTINATION" "")
  if(NOT arg_TARGET OR NOT arg_DESTINATION OR arg_UNPARSED_ARGUMENTS OR arg_KEYWORDS_MISSING_VALUES)
    message(FATAL_ERROR "aoti_deploy_install_runtime(TARGET <t> DESTINATION <dir> "
                        "[LIBRARY_DESTINATION <dir>] [RUNPATH <runpath>]), got: ${ARGV}")
  endif()
  if(NOT arg_LIBRARY_DESTINATION)
    set(arg_LIBRARY_DESTINATION lib)
  endif()
  foreach(_dir IN ITEMS "${arg_DESTINATION}" "${arg_LIBRARY_DESTINATION}")
    if(IS_ABSOLUTE "${_dir}")
      message(FATAL_ERROR "aoti_deploy_install_runtime(${arg_TARGET}): ${_dir} is absolute; the "
                          "destinations are relative to the install prefix, so the tree can move.")
    endif()
  endforeach()
  if(NOT arg_RUNPATH)
    # Both folders hang from the same prefix; any root stands in for it.
    file(RELATIVE_PATH _relative "/${arg_DESTINATION}" "/${arg_LIBRARY_DESTINATION}")
    set(arg_RUNPATH "$ORIGIN")
    if(NOT _relative STREQUAL "")
      string(APPEND arg_RUNPATH "/${_relative}")
    endif()
  endif()
  # file(GET_RUNTIME_DEPENDENCIES) reads executables, shared libraries and dlopen()ed
  # modules differently (only on Apple, but say what each one is).
  get_target_property(_type ${arg_TARGET} TYPE)
  if(_type STREQUAL "EXECUTABLE")
    set(_kind EXECUTABLES)
  elseif(_type STREQUAL "SHARED_LIBRARY")
    set(_kind LIBRARIES)
  elseif(_type STREQUAL "MODULE_LIBRARY")
    set(_kind MODULES)
  else()
    message(FATAL_ERROR "aoti_deploy_install_runtime: ${arg_TARGET} is a ${_type}, not a binary")
  endif()

  install(TARGETS ${arg_TARGET}
    RUNTIME DESTINATION "${arg_DESTINATION}"
    LIBRARY DESTINATION "${arg_DESTINATION}")
  # The dependencies are resolved from the build tree's copy, through its RUNPATH (the
  # venv's torch/lib), so they are copied from exactly where the build tree runs them.
  # The bracket arguments keep $ORIGIN literal in the generated install script.
  install(CODE "
    include(\"${_AOTI_DEPLOY_RUNTIME_SCRIPT}\")
    _aoti_deploy_copy_runtime(
      KIND ${_kind}
      BUILT [[$<TARGET_FILE:${arg_TARGET}>]]
      INSTALLED [[${arg_DESTINATION}/$<TARGET_FILE_NAME:${arg_TARGET}>]]
      RUNPATH [[${arg_RUNPATH}]]
      LIBRARY_DESTINATION [[${arg_LIBRARY_DESTINATION}]])")

  # One size report per install, after every rule of the top directory: deferred to
  # the end of its processing, so targets added later (e.g. the Triton backend) are
  # counted too.
  get_property(_reported GLOBAL PROPERTY _AOTI_DEPLOY_RUNTIME_REPORT)
  if(NOT _reported)
    set_property(GLOBAL PROPERTY _AOTI_DEPLOY_RUNTIME_REPORT ON)
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _aoti_deploy_install_report)
  endif()
endfunction()

function(_aoti_deploy_install_report)
  install(CODE "
    include(\"${_AOTI_DEPLOY_RUNTIME_SCRIPT}\")
    _aoti_deploy_report_runtime()")
endfunction()

# --- install time -------------------------------------------------------------------

# objdump for reading sonames and version references: the install script defines
# CMAKE_OBJDUMP (the configure step's), else the one on PATH; empty if there is none.
function(_aoti_deploy_objdump out)
  if(CMAKE_OBJDUMP AND EXISTS "${CMAKE_OBJDUMP}")
    set(${out} "${CMAKE_OBJDUMP}" PARENT_SCOPE)
    return()
  endif()
  find_program(_aoti_deploy_objdump_path NAMES objdump)
  if(_aoti_deploy_objdump_path)
    set(${out} "${_aoti_deploy_objdump_path}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()


# Gives an installed ELF file the RUNPATH <runpath>, with CMake's own ELF editor (the
# one install(TARGETS) uses). It rewrites an existing entry in place and cannot add
# one, which is enough here: the files that need a RUNPATH have one (our targets have
# the build tree's; torch's and the CUDA wheels' libraries have $ORIGIN-based ones), and
# a file without one (e.g. libcrypto) needs nothing beyond the system base.
function(_aoti_deploy_set_runpath file runpath)
  # READ_ELF leaves a variable untouched when the entry is absent.
  set(_rpath "")
  set(_runpath "")
  file(READ_ELF "${file}" RPATH _rpath RUNPATH _runpath CAPTURE_ERROR _error)
  if(_error)
    message(FATAL_ERROR "cannot read the ELF dynamic section of ${file}: ${_error}")
  endif()
  if(NOT "${_rpath}${_runpath}" STREQUAL "" AND NOT "${_rpath}${_runpath}" STREQUAL "${runpath}")
    file(RPATH_SET FILE "${file}" NEW_RPATH "${runpath}")
  endif()
endfunction()

function(_aoti_deploy_copy_runtime)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "KIND;BUILT;INSTALLED;RUNPATH;LIBRARY_DESTINATION" "")
  # file(INSTALL) adds $ENV{DESTDIR} itself; reading and editing the copies needs it.
  set(_libdir "${CMAKE_INSTALL_PREFIX}/${arg_LIBRARY_DESTINATION}")
  _aoti_deploy_set_runpath("$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${arg_INSTALLED}" "${arg_RUNPATH}")

  file(GET_RUNTIME_DEPENDENCIES
    ${arg_KIND} "${arg_BUILT}"
    RESOLVED_DEPENDENCIES_VAR _resolved
    UNRESOLVED_DEPENDENCIES_VAR _unresolved
    CONFLICTING_DEPENDENCIES_PREFIX _conflict
    PRE_EXCLUDE_REGEXES ${_AOTI_DEPLOY_SYSTEM_PRE_EXCLUDE}
    POST_EXCLUDE_REGEXES ${_AOTI_DEPLOY_SYSTEM_POST_EXCLUDE})
  if(_unresolved)
    list(JOIN _unresolved ", " _names)
    message(FATAL_ERROR "${arg_BUILT} needs ${_names}, found neither through its RUNPATH nor on this "
                        "system, so the installed runtime would not start.")
  endif()
  # One flat lib folder holds one file per name: two different files of the same name
  # (e.g. torch's libgomp and the system's) cannot both be installed.
  if(_conflict_FILENAMES)
    set(_lines "")
    foreach(_name IN LISTS _conflict_FILENAMES)
      list(JOIN _conflict_${_name} " and " _paths)
      string(APPEND _lines "\n  ${_name}: ${_paths}")
    endforeach()
    message(FATAL_ERROR "${arg_BUILT} needs libraries found in two places:${_lines}")
  endif()

  foreach(_dependency IN LISTS _resolved)
    # Another binary of this install may have brought the same name in already: then
    # it is done, if it is the same file.
    get_filename_component(_name "${_dependency}" NAME)
    get_property(_first GLOBAL PROPERTY "_AOTI_DEPLOY_RUNTIME_DEP_${_name}")
    # A different file of the same name (e.g. libcudart.so.13 from the CUDA wheels for
    # torch, and from the CUDA toolkit for the op library): the first one installed stays,
    # as in a running process, where the loader maps a soname once and the runner's
    # libraries come first.
    if(_first STREQUAL _dependency)
      continue()
    elseif(_first)
      message(STATUS "${_name}: ${arg_BUILT} was linked against ${_dependency}; the runtime uses "
                     "${_first}, installed first, as a running process would.")
      continue()
    endif()
    set_property(GLOBAL PROPERTY "_AOTI_DEPLOY_RUNTIME_DEP_${_name}" "${_dependency}")
    # FOLLOW_SYMLINK_CHAIN: a soname that is a link (libfoo.so.1 -> libfoo.so.1.2.3)
    # arrives as the same chain, so the loader finds the soname and the file is real.
    file(INSTALL DESTINATION "${_libdir}" TYPE SHARED_LIBRARY FOLLOW_SYMLINK_CHAIN FILES "${_dependency}")
    file(REAL_PATH "${_dependency}" _real)
    get_filename_component(_real_name "${_real}" NAME)
    # Installed libraries find each other beside themselves.
    _aoti_deploy_set_runpath("$ENV{DESTDIR}${_libdir}/${_real_name}" "$ORIGIN")
  endforeach()
  _aoti_deploy_check_openmp("${arg_BUILT}" "$ENV{DESTDIR}${_libdir}" ${_resolved})
  # file(INSTALL) records what it wrote in this variable, which a function scope would
  # drop: pass it up, so install_manifest.txt lists the dependencies too.
  set(CMAKE_INSTALL_MANIFEST_FILES "${CMAKE_INSTALL_MANIFEST_FILES}" PARENT_SCOPE)
endfunction()

# A package's model library, as AOTInductor compiles it on Linux, links OpenMP by the
# name libgomp.so.1 (-lgomp) and has no RUNPATH: at run time the loader finds it only as
# a library the runner has loaded already, matched by the name it was loaded as (a
# NEEDED entry) or by its soname. So when <built> uses a libgomp (one of its
# <dependencies>, installed in <libdir>, is named libgomp...), one of them must answer
# to libgomp.so.1. torch's own copy does today, but that is its packagers' choice (older
# wheels shipped libgomp-<hash>.so.1), so say it here rather than let a fleet machine
# find out at the first package it loads. CMake cannot read a soname (file(READ_ELF)
# has no such field): objdump -p reads it, where there is one.
function(_aoti_deploy_check_openmp built libdir)
  set(_openmp "")
  foreach(_dependency IN LISTS ARGN)
    get_filename_component(_name "${_dependency}" NAME)
    if(_name MATCHES "^libgomp([-_.]|$)")
      list(APPEND _openmp "${_name}")
    endif()
  endforeach()
  if(NOT _openmp OR "libgomp.so.1" IN_LIST _openmp)
    return()
  endif()
  _aoti_deploy_objdump(_objdump)
  set(_found "")
  foreach(_name IN LISTS _openmp)
    set(_soname "unknown: no objdump to read it")
    if(_objdump)
      execute_process(COMMAND "${_objdump}" -p "${libdir}/${_name}" OUTPUT_VARIABLE _headers ERROR_QUIET)
      if(_headers MATCHES "\n[ \t]*SONAME[ \t]+([^ \t\n]+)")
        set(_soname "${CMAKE_MATCH_1}")
      else()
        set(_soname "none")
      endif()
    endif()
    if(_soname STREQUAL "libgomp.so.1")
      return()
    endif()
    list(APPEND _found "${libdir}/${_name} (soname ${_soname})")
  endforeach()
  list(JOIN _found ", " _found)
  message(FATAL_ERROR
    "${built} uses OpenMP, but no library installed for it is libgomp.so.1, by name or soname.\n"
    "Expected: a library in ${libdir} named libgomp.so.1 or with that soname. The model "
    "library AOTInductor compiles into a package needs libgomp.so.1 by that name, and finds "
    "it only among the libraries the runner has loaded, so the installed runner could not "
    "load such a package.\n"
    "Found: ${_found}.\n"
    "Fix: build against a torch whose OpenMP runtime is libgomp.so.1 (the PyPI wheels' "
    "torch/lib/libgomp.so.1 is), or one linked against the system's libgomp.so.1.")
endfunction()

# "installed the C++ runtime to DIR: 421 MiB in 8 files": what this install wrote (the
# manifest so far), symlinks counted apart and not sized twice.
function(_aoti_deploy_report_runtime)
  set(_bytes 0)
  set(_files 0)
  set(_links 0)
  # A file installed twice (e.g. by a rerun of a rule) is listed twice.
  set(_manifest ${CMAKE_INSTALL_MANIFEST_FILES})
  list(REMOVE_DUPLICATES _manifest)
  set(_regular "")
  foreach(_file IN LISTS _manifest)
    set(_path "$ENV{DESTDIR}${_file}")
    if(IS_SYMLINK "${_path}")
      math(EXPR _links "${_links} + 1")
    elseif(EXISTS "${_path}")
      file(SIZE "${_path}" _size)
      math(EXPR _bytes "${_bytes} + ${_size}")
      math(EXPR _files "${_files} + 1")
      list(APPEND _regular "${_path}")
    endif()
  endforeach()
  math(EXPR _mib "(${_bytes} + 524288) / 1048576")
  set(_symlinks "")
  if(_links GREATER 0)
    set(_symlinks " and ${_links} symlinks")
  endif()
  _aoti_deploy_system_requirements(_needs ${_regular})
  message(STATUS "installed the C++ runtime to $ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}: "
                 "${_mib} MiB in ${_files} files${_symlinks}${_needs}")
endfunction()

# "; needs glibc >= 2.28 and GLIBCXX >= 3.4.30 on the target machine": the newest glibc
# and libstdc++ symbol versions <files> reference (what the system must provide, since
# those are not bundled), from their version references as `objdump -p` lists them, a few
# KiB per file. Empty when objdump is missing or no file references glibc.
function(_aoti_deploy_system_requirements out)
  set(${out} "" PARENT_SCOPE)
  _aoti_deploy_objdump(_objdump)
  if(NOT _objdump OR NOT ARGN)
    return()
  endif()
  execute_process(COMMAND "${_objdump}" -p ${ARGN} OUTPUT_VARIABLE _headers ERROR_QUIET)
  set(_needs "")
  foreach(_library IN ITEMS GLIBC GLIBCXX)
    string(REGEX MATCHALL "[ \t]${_library}_[0-9]+(\\.[0-9]+)*" _versions "${_headers}")
    set(_max "")
    foreach(_version IN LISTS _versions)
      string(REGEX REPLACE "^[ \t]${_library}_" "" _version "${_version}")
      if(_max STREQUAL "" OR _version VERSION_GREATER _max)
        set(_max "${_version}")
      endif()
    endforeach()
    if(NOT _max STREQUAL "")
      if(_library STREQUAL "GLIBC")
        set(_library glibc)
      endif()
      list(APPEND _needs "${_library} >= ${_max}")
    endif()
  endforeach()
  if(_needs MATCHES "^glibc")
    list(JOIN _needs " and " _needs)
    set(${out} "; needs ${_needs} on the target machine" PARENT_SCOPE)
  endif()
endfunction()
