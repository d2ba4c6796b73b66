{
  "targets": [{
    "target_name": "redirfs_native",
    "sources": ["redirfs_native.cc"],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS"],
    "cflags_cc": ["-O2", "-std=c++17", "-Wall"]
  }, {
    "target_name": "redirfs_fuse",
    "sources": ["fuse_server.cc", "fuse_ops.cc", "fuse_bindings.cc"],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS"],
    "cflags_cc": ["-O2", "-std=c++17", "-Wall", "-fvisibility=hidden", "<!@(pkg-config --cflags fuse3)"],
    "libraries": ["<!@(pkg-config --libs fuse3)"]
  }]
}
