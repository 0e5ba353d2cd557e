#ifndef CLIBCRYPTO_SHIM_H
#define CLIBCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/err.h>
#include <openssl/kdf.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

/* AES-GCM calls of the per-chunk path (ACCrypto/AESGCM+OpenSSL.swift), with their parameter arrays
 * built here (OSSL_PARAM's initialiser macros are not visible to Swift). */

/* Sets the whole 12-byte nonce of the next operation, keeping the key and the direction: the GCM
 * "fixed IV" parameter with the length -1, which every OpenSSL 3 GCM implementation (and the
 * EVP_CTRL_GCM_SET_IV_FIXED control before it) documents as "restores the whole IV". It skips
 * EVP_CipherInit_ex's EVP_CIPHER_CTX_get_iv_length, which asks the provider for its parameters on
 * every call. Returns 1, or 0 (nothing set) when the provider refuses it. */
static inline int acsecure_gcm_set_nonce(EVP_CIPHER_CTX *ctx, const unsigned char *nonce) {
    OSSL_PARAM params[2] = {
        OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TLS1_IV_FIXED, (void *)nonce, (size_t)-1),
        OSSL_PARAM_END
    };
    return EVP_CIPHER_CTX_set_params(ctx, params);
}

/* EVP_CTRL_AEAD_GET_TAG / SET_TAG without EVP_CIPHER_CTX_ctrl's dispatch: the same parameter. */
static inline int acsecure_gcm_get_tag(EVP_CIPHER_CTX *ctx, void *tag, size_t count) {
    OSSL_PARAM params[2] = { OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, count), OSSL_PARAM_END };
    return EVP_CIPHER_CTX_get_params(ctx, params);
}

static inline int acsecure_gcm_set_tag(EVP_CIPHER_CTX *ctx, const void *tag, size_t count) {
    OSSL_PARAM params[2] = { OSSL_PARAM_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, (void *)tag, count), OSSL_PARAM_END };
    return EVP_CIPHER_CTX_set_params(ctx, params);
}
#endif
