file(REMOVE_RECURSE
  "libdoctest_main.a"
)
