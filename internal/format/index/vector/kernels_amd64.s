#include "textflag.h"

// func l2BatchAVX2(set *float32, v *float32, rows int, w int, out *float32)
// out[r] = sum over i < w of (set[r*w+i] - v[i])^2, for r < rows; w is a
// positive multiple of 8.
TEXT ·l2BatchAVX2(SB), NOSPLIT, $0-40
	MOVQ set+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ rows+16(FP), CX
	MOVQ w+24(FP), DX
	MOVQ out+32(FP), R8
	TESTQ CX, CX
	JE   l2done

l2row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DI, R9
	MOVQ DX, R10
	CMPQ R10, $16
	JL   l2tail

l2loop:
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VSUBPS      (R9), Y2, Y2
	VSUBPS      32(R9), Y3, Y3
	VFMADD231PS Y2, Y2, Y0
	VFMADD231PS Y3, Y3, Y1
	ADDQ        $64, SI
	ADDQ        $64, R9
	SUBQ        $16, R10
	CMPQ        R10, $16
	JGE         l2loop

l2tail:
	TESTQ       R10, R10
	JE          l2reduce
	VMOVUPS     (SI), Y2
	VSUBPS      (R9), Y2, Y2
	VFMADD231PS Y2, Y2, Y0
	ADDQ        $32, SI

l2reduce:
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (R8)
	ADDQ         $4, R8
	DECQ         CX
	JNE          l2row
	VZEROUPPER

l2done:
	RET

// func dotBatchAVX2(set *float32, v *float32, rows int, w int, out *float32)
// out[r] = sum over i < w of set[r*w+i] * v[i], for r < rows; w is a
// positive multiple of 8.
TEXT ·dotBatchAVX2(SB), NOSPLIT, $0-40
	MOVQ set+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ rows+16(FP), CX
	MOVQ w+24(FP), DX
	MOVQ out+32(FP), R8
	TESTQ CX, CX
	JE   dotdone

dotrow:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DI, R9
	MOVQ DX, R10
	CMPQ R10, $16
	JL   dottail

dotloop:
	VMOVUPS     (SI), Y2
	VMOVUPS     32(SI), Y3
	VFMADD231PS (R9), Y2, Y0
	VFMADD231PS 32(R9), Y3, Y1
	ADDQ        $64, SI
	ADDQ        $64, R9
	SUBQ        $16, R10
	CMPQ        R10, $16
	JGE         dotloop

dottail:
	TESTQ       R10, R10
	JE          dotreduce
	VMOVUPS     (SI), Y2
	VFMADD231PS (R9), Y2, Y0
	ADDQ        $32, SI

dotreduce:
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (R8)
	ADDQ         $4, R8
	DECQ         CX
	JNE          dotrow
	VZEROUPPER

dotdone:
	RET

// func l2ColumnsAVX2(cols *float32, v *float32, k int, w int, out *float32)
// cols holds k vectors of w values column-major (value d of vector j at
// cols[d*k+j]); out[j] = sum over d < w of (cols[d*k+j] - v[d])^2, for
// j < k; k is a positive multiple of 8, w positive.
TEXT ·l2ColumnsAVX2(SB), NOSPLIT, $0-40
	MOVQ cols+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ k+16(FP), CX
	MOVQ w+24(FP), DX
	MOVQ out+32(FP), R8
	MOVQ CX, R11
	SHLQ $2, R11
	XORQ BX, BX

l2c32:
	CMPQ   CX, $32
	JL     l2c8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ   (SI)(BX*1), R9
	MOVQ   DI, R10
	MOVQ   DX, R12

l2c32dim:
	VBROADCASTSS (R10), Y4
	VSUBPS       (R9), Y4, Y5
	VSUBPS       32(R9), Y4, Y6
	VSUBPS       64(R9), Y4, Y7
	VSUBPS       96(R9), Y4, Y8
	VFMADD231PS  Y5, Y5, Y0
	VFMADD231PS  Y6, Y6, Y1
	VFMADD231PS  Y7, Y7, Y2
	VFMADD231PS  Y8, Y8, Y3
	ADDQ         R11, R9
	ADDQ         $4, R10
	DECQ         R12
	JNE          l2c32dim
	VMOVUPS      Y0, (R8)(BX*1)
	VMOVUPS      Y1, 32(R8)(BX*1)
	VMOVUPS      Y2, 64(R8)(BX*1)
	VMOVUPS      Y3, 96(R8)(BX*1)
	ADDQ         $128, BX
	SUBQ         $32, CX
	JMP          l2c32

l2c8:
	TESTQ  CX, CX
	JE     l2cdone
	VXORPS Y0, Y0, Y0
	LEAQ   (SI)(BX*1), R9
	MOVQ   DI, R10
	MOVQ   DX, R12

l2c8dim:
	VBROADCASTSS (R10), Y4
	VSUBPS       (R9), Y4, Y5
	VFMADD231PS  Y5, Y5, Y0
	ADDQ         R11, R9
	ADDQ         $4, R10
	DECQ         R12
	JNE          l2c8dim
	VMOVUPS      Y0, (R8)(BX*1)
	ADDQ         $32, BX
	SUBQ         $8, CX
	JMP          l2c8

l2cdone:
	VZEROUPPER
	RET

// func dotColumnsAVX2(cols *float32, v *float32, k int, w int, out *float32)
// As l2ColumnsAVX2 with out[j] = sum over d < w of cols[d*k+j] * v[d].
TEXT ·dotColumnsAVX2(SB), NOSPLIT, $0-40
	MOVQ cols+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ k+16(FP), CX
	MOVQ w+24(FP), DX
	MOVQ out+32(FP), R8
	MOVQ CX, R11
	SHLQ $2, R11
	XORQ BX, BX

dotc32:
	CMPQ   CX, $32
	JL     dotc8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ   (SI)(BX*1), R9
	MOVQ   DI, R10
	MOVQ   DX, R12

dotc32dim:
	VBROADCASTSS (R10), Y4
	VFMADD231PS  (R9), Y4, Y0
	VFMADD231PS  32(R9), Y4, Y1
	VFMADD231PS  64(R9), Y4, Y2
	VFMADD231PS  96(R9), Y4, Y3
	ADDQ         R11, R9
	ADDQ         $4, R10
	DECQ         R12
	JNE          dotc32dim
	VMOVUPS      Y0, (R8)(BX*1)
	VMOVUPS      Y1, 32(R8)(BX*1)
	VMOVUPS      Y2, 64(R8)(BX*1)
	VMOVUPS      Y3, 96(R8)(BX*1)
	ADDQ         $128, BX
	SUBQ         $32, CX
	JMP          dotc32

dotc8:
	TESTQ  CX, CX
	JE     dotcdone
	VXORPS Y0, Y0, Y0
	LEAQ   (SI)(BX*1), R9
	MOVQ   DI, R10
	MOVQ   DX, R12

dotc8dim:
	VBROADCASTSS (R10), Y4
	VFMADD231PS  (R9), Y4, Y0
	ADDQ         R11, R9
	ADDQ         $4, R10
	DECQ         R12
	JNE          dotc8dim
	VMOVUPS      Y0, (R8)(BX*1)
	ADDQ         $32, BX
	SUBQ         $8, CX
	JMP          dotc8

dotcdone:
	VZEROUPPER
	RET
