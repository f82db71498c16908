// The King James Bible, embedded: the bytes of assets/kjv/kjv.txt.gz (format and provenance:
// assets/kjv/README.md) between the symbols hz_kjv_gz_begin and hz_kjv_gz_end, read by
// data/corpus.cpp load_bible_kjv(). Embedding them means `horizon` needs no repository, data file
// or package at run time (a GPU node runs it from the binary alone).
//
// The assembler's .incbin copies the file into read-only data at build time; CMake passes its
// absolute path as HZ_KJV_GZ and lists it in OBJECT_DEPENDS, so editing the .gz rebuilds this
// object (the compiler's dependency scan does not see .incbin). GNU as / ELF (Linux) only.
#ifndef HZ_KJV_GZ
#error "HZ_KJV_GZ (the path of assets/kjv/kjv.txt.gz) must be defined by the build (CMakeLists.txt)"
#endif

asm(".pushsection .rodata.hz_kjv_gz, \"a\", @progbits\n"
    ".balign 16\n"
    ".globl hz_kjv_gz_begin\n"
    ".hidden hz_kjv_gz_begin\n"
    ".type hz_kjv_gz_begin, @object\n"
    "hz_kjv_gz_begin:\n"
    ".incbin \"" HZ_KJV_GZ "\"\n"
    ".globl hz_kjv_gz_end\n"
    ".hidden hz_kjv_gz_end\n"
    ".type hz_kjv_gz_end, @object\n"
    "hz_kjv_gz_end:\n"
    ".size hz_kjv_gz_begin, hz_kjv_gz_end - hz_kjv_gz_begin\n"
    ".popsection\n");
